package peers

import (
	"testing"
	"time"
)

// TestSeries: requests, errors and head times land in their 10 s slot;
// a slot that comes round again is cleared; the quantiles read back
// within a bucket's width (a fifth of an octave).
func TestSeries(t *testing.T) {
	r, _ := newTestRegistry(t, 3, parent("p1", 1))
	p := r.Get("p1")
	start := time.Unix(1_800_000_000, 0)
	for i := range 100 {
		at := start.Add(time.Duration(i) * 50 * time.Millisecond) // 5 s: one slot
		r.BeginRequest(p, at)
		r.EndRequest(p)
		head := 10 * time.Millisecond
		if i >= 98 {
			head = time.Second // the slowest 2 of 100
		}
		observeAnswer(r, p, AnswerOK, head, at)
	}
	observeAnswer(r, p, AnswerClosed, 0, start)
	r.Observe(p, Outcome{At: start, Err: errRefused})
	pts := p.Health().Recent(start.Add(5*time.Second), time.Minute)
	if len(pts) != 6 {
		t.Fatalf("%d points for a minute; want 6", len(pts))
	}
	last := pts[len(pts)-1]
	if last.Requests != 100 || last.Errors != 2 || last.Heads != 100 {
		t.Fatalf("the slot: %+v; want 100 requests, 2 errors, 100 heads", last)
	}
	within := func(got, want time.Duration) bool { return got > want*8/10 && got < want*12/10 }
	if !within(last.P50, 10*time.Millisecond) || !within(last.P99, time.Second) {
		t.Fatalf("p50 %v p99 %v; want about 10ms and 1s", last.P50, last.P99)
	}
	if q, n := p.Health().HeadQuantile(start.Add(5*time.Second), time.Minute, 0.5); n != 100 || !within(q, 10*time.Millisecond) {
		t.Fatalf("median over a minute: %v of %d", q, n)
	}
	// 15 minutes later the same slot index holds a new period: cleared.
	later := start.Add(Slots * SlotWidth)
	r.BeginRequest(p, later)
	if pts := p.Health().Recent(later, SlotWidth); pts[0].Requests != 1 || pts[0].Heads != 0 {
		t.Fatalf("the slot come round again: %+v; want only the new request", pts[0])
	}
	if _, n := p.Health().HeadQuantile(later, 15*time.Minute, 0.5); n != 0 {
		t.Fatalf("%d heads 15 minutes later; want none", n)
	}
}
