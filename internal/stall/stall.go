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

	mu      sync.Mutex
	last    time.Time // the last tick (or catch-up)
	start   [ring]int64
	end     [ring]int64
	n       int // stalls recorded (the ring holds the last ring of them)
	totalNs atomic.Int64
	// lastEnd and lastTick mirror the newest stall's end and g.last for
	// Stalled's lock-free answer on the request path.
	lastEnd, lastTick atomic.Int64
	schedBuf          []metrics.Sample
	schedHi           uint64 // scheduling-latency samples at or over Slack seen so far
	noSched           bool   // the ticker alone (a test under synctest's clock)
}

// New returns a guard reading the clock now (nil: time.Now), on.
func New(now func() time.Time) *Guard {
	if now == nil {
		now = time.Now
	}
	g := &Guard{now: now}
	g.last = now()
	g.lastTick.Store(g.last.UnixNano())
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
	g.lastTick.Store(g.last.UnixNano())
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
			if g.noSched {
				continue
			}
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
		g.lastTick.Store(now.UnixNano())
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
				g.lastEnd.Store(max(g.lastEnd.Load(), g.end[k]))
			}
			return
		}
	}
	k := g.n % ring
	g.start[k], g.end[k] = from.UnixNano(), to.UnixNano()
	g.n++
	g.totalNs.Add(to.UnixNano() - from.UnixNano())
	if to.UnixNano() > g.lastEnd.Load() {
		g.lastEnd.Store(to.UnixNano())
	}
}

// Stalled is how much of [from, to] the process was stalled; 0 when the
// guard is off (or nil).
func (g *Guard) Stalled(from, to time.Time) time.Duration {
	if g == nil || !g.on.Load() {
		return 0
	}
	f, t := from.UnixNano(), to.UnixNano()
	now := g.now().UnixNano()
	if now-g.lastTick.Load() <= int64(Tick+Slack) && g.lastEnd.Load() <= f {
		return 0 // no stall since from, and none pending: no lock taken
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.observeLocked(time.Unix(0, now)) // a stall that just ended, not yet ticked
	var d int64
	// Newest first; stalls are recorded in order, so the scan stops at
	// the first that ended before from.
	for i := g.n - 1; i >= max(0, g.n-ring); i-- {
		k := i % ring
		if g.end[k] <= f {
			break
		}
		s, e := max(g.start[k], f), min(g.end[k], t)
		if e > s {
			d += e - s
		}
	}
	return time.Duration(d)
}

// WithTimeout is context.WithTimeout whose deadline stretches by the
// stalls within it: the context ends once timeout of the time peerd ran
// has passed (stall_guard), so that a peer that did not answer in time is
// blamed only when it had all of that time. Its cause is then
// context.DeadlineExceeded (context.Cause). Off (or nil), it is
// context.WithTimeout.
func (g *Guard) WithTimeout(parent context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if g == nil || !g.on.Load() || timeout <= 0 {
		return context.WithTimeout(parent, timeout)
	}
	ctx, cancel := context.WithCancelCause(parent)
	dl := g.Deadline(g.now(), timeout) // read by the timer's function alone
	var mu sync.Mutex
	var t *time.Timer
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(timeout, func() {
		if left := dl.Left(g.now()); left > 0 {
			mu.Lock()
			t.Reset(left)
			mu.Unlock()
			return
		}
		cancel(context.DeadlineExceeded)
	})
	return ctx, func() {
		mu.Lock()
		t.Stop()
		mu.Unlock()
		cancel(context.Canceled)
	}
}

// Total is the stall time recorded since the guard started
// (peerd_stall_seconds_total).
func (g *Guard) Total() time.Duration {
	if g == nil {
		return 0
	}
	return time.Duration(g.totalNs.Load())
}
