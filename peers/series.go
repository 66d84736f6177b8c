package peers

// This file holds a peer's recent past as a time series: requests, errors
// and a histogram of response-head times for each 10-second slot of the
// last 15 minutes. The status page draws it; the requests' path writes it
// with atomic adds only (a slot that comes round again is cleared by the
// first writer that finds it stale, and a count that lands while it is
// cleared may be lost: a chart, not a ledger).

import (
	"math"
	"sync/atomic"
	"time"
)

const (
	// SlotWidth is a slot's span; Slots of them make the window.
	SlotWidth = 10 * time.Second
	Slots     = 90
	// Head times are kept in log-scale buckets, four to an octave, from
	// 100 µs (the first bucket is everything below) to about 100 s.
	headBuckets = 80
	headBase    = 100 * time.Microsecond
)

// slot is one SlotWidth of a peer's traffic.
type slot struct {
	epoch    atomic.Int64 // which SlotWidth (Unix time / SlotWidth) it holds
	requests atomic.Uint32
	errors   atomic.Uint32
	heads    [headBuckets]atomic.Uint32
}

// series is a peer's last Slots slots.
type series struct{ slots [Slots]slot }

// at is the slot for t, cleared first when it held an older period.
func (s *series) at(t time.Time) *slot {
	e := t.UnixNano() / int64(SlotWidth)
	sl := &s.slots[e%Slots]
	if old := sl.epoch.Load(); old != e && old < e && sl.epoch.CompareAndSwap(old, e) {
		sl.requests.Store(0)
		sl.errors.Store(0)
		for i := range sl.heads {
			sl.heads[i].Store(0)
		}
	}
	return sl
}

func (s *series) request(t time.Time) { s.at(t).requests.Add(1) }
func (s *series) failure(t time.Time) { s.at(t).errors.Add(1) }
func (s *series) head(t time.Time, d time.Duration) {
	s.at(t).heads[headBucket(d)].Add(1)
}

// headBucket is the bucket of a head time.
func headBucket(d time.Duration) int {
	if d < headBase {
		return 0
	}
	b := int(4*math.Log2(float64(d)/float64(headBase))) + 1
	return min(b, headBuckets-1)
}

// bucketMid is a bucket's middle head time (its geometric mean).
func bucketMid(b int) time.Duration {
	if b == 0 {
		return headBase / 2
	}
	return time.Duration(float64(headBase) * math.Exp2((float64(b)-0.5)/4))
}

// Point is one slot of a peer's recent past.
type Point struct {
	Start    time.Time
	Requests int64
	Errors   int64
	// P50 and P99 are the slot's median and 99th percentile response-head
	// times (0 without heads in the slot); Heads counts them.
	P50, P99 time.Duration
	Heads    int64
}

// Recent returns the peer's slots of the last window (oldest first, one
// per SlotWidth up to now, empty ones included).
func (h *Health) Recent(now time.Time, window time.Duration) []Point {
	n := int(min(window/SlotWidth, Slots))
	last := now.UnixNano() / int64(SlotWidth)
	out := make([]Point, 0, n)
	for e := last - int64(n) + 1; e <= last; e++ {
		pt := Point{Start: time.Unix(0, e*int64(SlotWidth))}
		sl := &h.series.slots[e%Slots]
		if sl.epoch.Load() == e {
			pt.Requests, pt.Errors = int64(sl.requests.Load()), int64(sl.errors.Load())
			var hist [headBuckets]int64
			for i := range sl.heads {
				hist[i] = int64(sl.heads[i].Load())
				pt.Heads += hist[i]
			}
			pt.P50, pt.P99 = quantile(hist[:], pt.Heads, 0.50), quantile(hist[:], pt.Heads, 0.99)
		}
		out = append(out, pt)
	}
	return out
}

// HeadQuantile is the q-quantile of the peer's response-head times over
// the last window, and how many heads it is made of.
func (h *Health) HeadQuantile(now time.Time, window time.Duration, q float64) (time.Duration, int64) {
	var hist [headBuckets]int64
	var n int64
	last := now.UnixNano() / int64(SlotWidth)
	for e := last - int64(min(window/SlotWidth, Slots)) + 1; e <= last; e++ {
		sl := &h.series.slots[e%Slots]
		if sl.epoch.Load() != e {
			continue
		}
		for i := range sl.heads {
			v := int64(sl.heads[i].Load())
			hist[i] += v
			n += v
		}
	}
	return quantile(hist[:], n, q), n
}

// quantile reads the q-quantile of n values from a histogram.
func quantile(hist []int64, n int64, q float64) time.Duration {
	if n == 0 {
		return 0
	}
	want := int64(math.Ceil(q * float64(n)))
	var seen int64
	for i, c := range hist {
		seen += c
		if seen >= want {
			return bucketMid(i)
		}
	}
	return bucketMid(len(hist) - 1)
}
