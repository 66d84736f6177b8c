// Package stall measures peerd's own stalls (contract section 21,
// stall_guard): times when the process itself did not run — a stopped
// process (SIGSTOP, a paused VM), CPU starvation, a long scheduling
// delay — so that deadlines that fired late because of it are stretched,
// and no parent is blamed for an answer peerd was not there to read
// (memberlist's Lifeguard refuses to blame peers for a slow local node
// the same way).
//
// A ticker runs every Tick; the time between two firings beyond Tick
// (and a small slack for ordinary scheduling) is a stall, kept as a
// wall-clock interval in a small ring. The runtime's own scheduling
// latencies (runtime/metrics) add stalls the ticker may miss between its
// firings. Stalled answers how much of a period was stalled; it first
// catches up with a stall that has just ended but that the ticker has not
// run to record yet, since on resuming, the goroutine whose deadline
// fired may run before it.
package stall

import (
	"context"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// Tick is how often the guard looks at the clock; Slack how late a tick
// may be before the delay counts as a stall.
const (
	Tick  = 20 * time.Millisecond
	Slack = 30 * time.Millisecond
)

// ring is how many stalls are kept: enough for the longest deadline peerd
// stretches (read_timeout) at one stall per second.
const ring = 1024

// Guard records stalls. The zero value is off: it records nothing and
// reports none. A Guard is safe for concurrent use.
type Guard struct {
	on  atomic.Bool
	now func() time.Time

	mu       sync.Mutex
	last     time.Time // the last tick (or catch-up)
	start    [ring]int64
	end      [ring]int64
	n        int // stalls recorded (the ring holds the last ring of them)
	totalNs  atomic.Int64
	schedBuf []metrics.Sample
	schedHi  uint64 // scheduling-latency samples at or over Slack seen so far
}

// New returns a guard reading the clock now (nil: time.Now), on.
func New(now func() time.Time) *Guard {
	if now == nil {
		now = time.Now
	}
	g := &Guard{now: now}
	g.last = now()
	g.on.Store(true)
	return g
}

// SetOn turns the guard on or off ([health] stall_guard); off, it
// reports no stall.
func (g *Guard) SetOn(on bool) {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.last = g.now()
	g.mu.Unlock()
	g.on.Store(on)
}

// Run ticks until ctx ends.
func (g *Guard) Run(ctx context.Context) {
	t := time.NewTicker(Tick)
	defer t.Stop()
	g.schedBuf = []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	g.schedHi = g.schedOver()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.Observe(g.now())
			if hi := g.schedOver(); hi > g.schedHi {
				// The runtime saw goroutines wait Slack or more to
				// run: peerd was starved for at least that long.
				g.schedHi = hi
				at := g.now()
				g.add(at.Add(-Slack), at)
			}
		}
	}
}

// schedOver counts the scheduling-latency samples at or over Slack.
func (g *Guard) schedOver() uint64 {
	metrics.Read(g.schedBuf)
	if g.schedBuf[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	h := g.schedBuf[0].Value.Float64Histogram()
	var n uint64
	for i, c := range h.Counts {
		if h.Buckets[i] >= Slack.Seconds() {
			n += c
		}
	}
	return n
}

// Observe is one tick at now: the time since the last beyond Tick and
// Slack is recorded as a stall that ended now.
func (g *Guard) Observe(now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.observeLocked(now)
}

func (g *Guard) observeLocked(now time.Time) {
	if late := now.Sub(g.last) - Tick; late > Slack && g.on.Load() {
		g.addLocked(g.last.Add(Tick), now)
	}
	if now.After(g.last) {
		g.last = now
	}
}

func (g *Guard) add(from, to time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.addLocked(from, to)
}

func (g *Guard) addLocked(from, to time.Time) {
	if !to.After(from) {
		return
	}
	// Overlapping the last one (a starvation seen by both the ticker and
	// the runtime): merged.
	if g.n > 0 {
		k := (g.n - 1) % ring
		if from.UnixNano() <= g.end[k] {
			if to.UnixNano() > g.end[k] {
				g.totalNs.Add(to.UnixNano() - g.end[k])
				g.end[k] = to.UnixNano()
			}
			return
		}
	}
	k := g.n % ring
	g.start[k], g.end[k] = from.UnixNano(), to.UnixNano()
	g.n++
	g.totalNs.Add(to.UnixNano() - from.UnixNano())
}

// Stalled is how much of [from, to] the process was stalled; 0 when the
// guard is off (or nil).
func (g *Guard) Stalled(from, to time.Time) time.Duration {
	if g == nil || !g.on.Load() {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.observeLocked(g.now()) // a stall that just ended, not yet ticked
	var d int64
	f, t := from.UnixNano(), to.UnixNano()
	for i := max(0, g.n-ring); i < g.n; i++ {
		k := i % ring
		s, e := max(g.start[k], f), min(g.end[k], t)
		if e > s {
			d += e - s
		}
	}
	return time.Duration(d)
}

// Total is the stall time recorded since the guard started
// (peerd_stall_seconds_total).
func (g *Guard) Total() time.Duration {
	if g == nil {
		return 0
	}
	return time.Duration(g.totalNs.Load())
}
