package stall

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// TestStallsFromAJumpingClock: ticks on time record nothing; a clock that
// jumps between two ticks (a stopped process) is a stall, counted once,
// reported for the periods it overlaps, and caught up with before the
// ticker has run again.
func TestStallsFromAJumpingClock(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	g := New(c.now)
	start := c.t
	for i := 0; i < 10; i++ {
		c.t = c.t.Add(Tick + 5*time.Millisecond) // a little late: scheduling, not a stall
		g.Observe(c.t)
	}
	if s := g.Stalled(start, c.t); s != 0 || g.Total() != 0 {
		t.Fatalf("ticks on time: stalled %v, total %v", s, g.Total())
	}
	before := c.t
	c.t = c.t.Add(300*time.Millisecond + Tick) // stopped for 300 ms
	g.Observe(c.t)
	if s := g.Stalled(before, c.t); s != 300*time.Millisecond {
		t.Fatalf("a 300 ms stop: stalled %v", s)
	}
	if s := g.Stalled(start, before); s != 0 {
		t.Fatalf("before the stop: stalled %v", s)
	}
	if s := g.Stalled(before.Add(100*time.Millisecond), before.Add(200*time.Millisecond)); s != 100*time.Millisecond {
		t.Fatalf("a part of the stop: stalled %v", s)
	}
	// A stop that has just ended, before the ticker ran again.
	mark := c.t
	c.t = c.t.Add(500 * time.Millisecond)
	if s := g.Stalled(mark, c.t); s != 500*time.Millisecond-Tick {
		t.Fatalf("caught up: stalled %v; want %v", s, 500*time.Millisecond-Tick)
	}
	g.Observe(c.t) // the ticker, late: nothing twice
	if tot := g.Total(); tot != 300*time.Millisecond+500*time.Millisecond-Tick {
		t.Fatalf("total %v", tot)
	}
	g.SetOn(false)
	c.t = c.t.Add(time.Second)
	g.Observe(c.t)
	if s := g.Stalled(mark, c.t); s != 0 {
		t.Fatalf("off: stalled %v", s)
	}
	var off *Guard
	if off.Stalled(mark, c.t) != 0 || off.Total() != 0 {
		t.Fatal("a nil guard reports a stall")
	}
}

// TestWithTimeoutStretches: a timeout within which peerd was stalled for
// 300 ms ends 300 ms later than the clock says, with DeadlineExceeded as
// its cause; with no stall it ends on time; cancelled, it ends at once.
func TestWithTimeoutStretches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(nil)
		g.noSched = true
		run, stop := context.WithCancel(context.Background())
		defer stop()
		go g.Run(run)
		start := time.Now()
		ctx, cancel := g.WithTimeout(context.Background(), time.Second)
		defer cancel()
		time.Sleep(500 * time.Millisecond)
		g.add(start.Add(200*time.Millisecond), start.Add(500*time.Millisecond)) // stopped meanwhile
		<-ctx.Done()
		if d := time.Since(start); d != 1300*time.Millisecond {
			t.Fatalf("a 1s timeout with a 300ms stall ended after %v; want 1.3s", d)
		}
		if !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			t.Fatalf("cause %v", context.Cause(ctx))
		}

		start = time.Now()
		ctx2, cancel2 := g.WithTimeout(context.Background(), time.Second)
		defer cancel2()
		<-ctx2.Done()
		if d := time.Since(start); d != time.Second {
			t.Fatalf("no stall: ended after %v", d)
		}

		ctx3, cancel3 := g.WithTimeout(context.Background(), time.Second)
		cancel3()
		if context.Cause(ctx3) != context.Canceled {
			t.Fatalf("cancelled: cause %v", context.Cause(ctx3))
		}
	})
}

// TestStretchCountsAStallOnce: a deadline moves on by each stall once,
// however often it asks; a nil guard never moves it.
func TestStretchCountsAStallOnce(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	g := New(c.now)
	s := g.Since(c.t)
	c.t = c.t.Add(Tick)
	g.Observe(c.t)
	if d := s.More(c.t); d != 0 {
		t.Fatalf("no stall: %v", d)
	}
	c.t = c.t.Add(200*time.Millisecond + Tick)
	g.Observe(c.t)
	if d := s.More(c.t); d != 200*time.Millisecond {
		t.Fatalf("a 200 ms stall: %v", d)
	}
	if d := s.More(c.t); d != 0 {
		t.Fatalf("asked again: %v", d)
	}
	c.t = c.t.Add(100*time.Millisecond + Tick)
	g.Observe(c.t)
	if d := s.More(c.t); d != 100*time.Millisecond {
		t.Fatalf("a second stall: %v", d)
	}
	var off *Guard
	n := off.Since(c.t)
	if d := n.More(c.t.Add(time.Hour)); d != 0 {
		t.Fatalf("a nil guard: %v", d)
	}
}
