package stall

import (
	"context"
	"errors"
	"net"
	"os"
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

// TestDeadlineCountsAStallOnce: a deadline moves on by each stall once,
// however often it is asked; a nil guard never moves it, and the zero
// Deadline never passes.
func TestDeadlineCountsAStallOnce(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	g := New(c.now)
	start := c.t
	d := g.Deadline(start, time.Second)
	c.t = c.t.Add(Tick)
	g.Observe(c.t)
	if d.Passed(c.t) || d.At() != start.Add(time.Second) {
		t.Fatalf("no stall: passed %v, at %v", d.Passed(c.t), d.At().Sub(start))
	}
	c.t = c.t.Add(200*time.Millisecond + Tick)
	g.Observe(c.t)
	c.tickTo(g, start.Add(time.Second)) // at the deadline the clock says
	if d.Passed(c.t) {
		t.Fatal("a 200 ms stall within it: passed on the clock's time")
	}
	if got := d.At().Sub(start); got != 1200*time.Millisecond {
		t.Fatalf("a 200 ms stall: deadline after %v; want 1.2s", got)
	}
	if left := d.Left(c.t); left != 200*time.Millisecond {
		t.Fatalf("asked again: %v left; want 200ms (the stall counted once)", left)
	}
	c.t = c.t.Add(100*time.Millisecond + Tick)
	g.Observe(c.t)
	c.tickTo(g, start.Add(1200*time.Millisecond))
	if d.Passed(c.t) || d.At().Sub(start) != 1300*time.Millisecond {
		t.Fatalf("a second stall: deadline after %v; want 1.3s", d.At().Sub(start))
	}
	c.tickTo(g, start.Add(1300*time.Millisecond))
	if !d.Passed(c.t) {
		t.Fatal("not passed at its stretched time")
	}
	var off *Guard
	n := off.Deadline(c.t, time.Second)
	if !n.Passed(c.t.Add(time.Second)) {
		t.Fatal("a nil guard: the deadline moved")
	}
	var none Deadline
	if none.Passed(c.t.Add(time.Hour)) || none.Set() {
		t.Fatal("the zero Deadline passed")
	}
}

// tickTo moves the clock on to t a tick at a time, each observed: no
// stall on the way.
func (c *clock) tickTo(g *Guard, t time.Time) {
	for c.t.Before(t) {
		c.t = c.t.Add(Tick)
		if c.t.After(t) {
			c.t = t
		}
		g.Observe(c.t)
	}
}

// TestConnReadsOnThroughAStall: a read under a 1 s deadline within which
// peerd was stalled for 300 ms still gets bytes that come at 1.2 s; with
// no stall it times out at 1 s.
func TestConnReadsOnThroughAStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(nil)
		g.noSched = true
		run, stop := context.WithCancel(context.Background())
		defer stop()
		go g.Run(run)
		for _, stalled := range []bool{true, false} {
			a, b := net.Pipe()
			start := time.Now()
			c := g.Conn(a, start, time.Second)
			wrote := make(chan struct{})
			go func() {
				defer close(wrote)
				time.Sleep(500 * time.Millisecond)
				if stalled {
					g.add(start.Add(200*time.Millisecond), start.Add(500*time.Millisecond))
				}
				time.Sleep(700 * time.Millisecond)
				b.Write([]byte("x"))
			}()
			buf := make([]byte, 1)
			n, err := c.Read(buf)
			switch {
			case stalled && (n != 1 || err != nil):
				t.Fatalf("a 300 ms stall within the deadline: read %d, %v after %v; want the byte at 1.2s", n, err, time.Since(start))
			case !stalled && (!errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) != time.Second):
				t.Fatalf("no stall: read %d, %v after %v; want a timeout at 1s", n, err, time.Since(start))
			}
			a.Close()
			<-wrote
			b.Close()
		}
	})
}
