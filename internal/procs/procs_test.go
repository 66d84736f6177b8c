package procs

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestNext(t *testing.T) {
	quiet := func(cur, n int) state { return state{cur: cur, quiet: n, need: downAfter, since: 50} }
	for _, c := range []struct {
		name string
		in   state
		top  int
		busy float64
		want state
	}{
		{"idle at two counts a quiet window", quiet(2, 0), 2, 0.1,
			state{cur: 2, quiet: 1, need: 5, since: 51}},
		{"the fifth quiet window gives one up", quiet(2, 4), 2, 0.1,
			state{cur: 1, need: 5, down: true}},
		{"the bench's saturation at two (0.77 cores) is quiet", quiet(2, 4), 2, 0.77,
			state{cur: 1, need: 5, down: true}},
		{"0.9 cores at two is not quiet", quiet(2, 4), 2, 0.9,
			state{cur: 2, need: 5, since: 51}},
		{"a loud window resets the quiet count", quiet(2, 3), 2, 1.5,
			state{cur: 2, need: 5, since: 51}},
		{"one thread below the line holds", quiet(1, 0), 2, 0.84,
			state{cur: 1, need: 5, since: 51}},
		{"one thread at the line gets a second at once", quiet(1, 0), 2, 0.85,
			state{cur: 2, need: 5}},
		{"a raise soon after a lowering doubles what the next one needs",
			state{cur: 1, need: 5, since: 3, down: true}, 2, 0.9,
			state{cur: 2, need: 10}},
		{"need stops at a minute",
			state{cur: 1, need: 300, since: 3, down: true}, 2, 0.9,
			state{cur: 2, need: 300}},
		{"a raise long after a lowering leaves need alone",
			state{cur: 1, need: 20, since: 100, down: true}, 2, 0.9,
			state{cur: 2, need: 20}},
		{"a lowering that held a minute sets need back",
			state{cur: 1, need: 80, since: 299, down: true}, 2, 0.3,
			state{cur: 1, need: 5, since: 300, down: true}},
		{"a raise aims for 0.6 of each thread", quiet(4, 0), 16, 3.5,
			state{cur: 6, need: 5}},
		{"a small raise steps by one", quiet(2, 0), 16, 1.75,
			state{cur: 3, need: 5}},
		{"a raise never passes the ceiling", quiet(1, 0), 2, 5,
			state{cur: 2, need: 5}},
		{"at the ceiling a full process holds", quiet(2, 0), 2, 2,
			state{cur: 2, need: 5, since: 51}},
		{"one thread never goes to none", quiet(1, 9), 2, 0,
			state{cur: 1, need: 5, since: 51}},
		{"never above the ceiling", quiet(4, 0), 2, 0.5,
			state{cur: 2, need: 5}},
	} {
		if got := c.in.next(c.top, c.busy); got != c.want {
			t.Errorf("%s: %+v.next(%d, %.2f) = %+v; want %+v", c.name, c.in, c.top, c.busy, got, c.want)
		}
	}
}

// TestFewChanges walks the decision, 200 ms windows for ten minutes, over
// every steady load from idle to two full cores, where one thread costs
// 0.82 × what two do (as in the bench) or the same (all CPU, where
// giving one up gains nothing): once settled, the count holds still, or
// at worst changes about once a minute.
func TestFewChanges(t *testing.T) {
	for _, oneVsTwo := range []float64{0.82, 1.0} {
		for load := 0.05; load < 2; load += 0.01 { // cores the load takes at two threads
			st, changes := start(2), 0
			for range 3000 {
				busy := load
				if st.cur == 1 {
					busy = min(1, load*oneVsTwo)
				}
				was := st.cur
				st = st.next(2, busy)
				if st.cur != was {
					changes++
				}
			}
			limit := 1
			if oneVsTwo == 1 && load >= 0.85 && load < 0.9 {
				limit = 2*6 + 2*10 // the back-off's six doublings, then one round trip a minute
			}
			if changes > limit {
				t.Errorf("load %.2f (one thread %.2f × two): %d changes in ten minutes, want at most %d", load, oneVsTwo, changes, limit)
			}
		}
	}
}

type fake struct {
	mu   sync.Mutex
	cpu  time.Duration
	busy float64 // cores kept busy from now on
	at   time.Time
	sets []int
}

func (f *fake) CPU() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	f.cpu += time.Duration(f.busy * float64(now.Sub(f.at)))
	f.at = now
	return f.cpu
}

func (f *fake) load(busy float64) {
	f.CPU() // account the time so far at the old load
	f.mu.Lock()
	f.busy = busy
	f.mu.Unlock()
}

func (f *fake) Set(n int) {
	f.mu.Lock()
	f.sets = append(f.sets, n)
	f.mu.Unlock()
}

func (f *fake) last() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sets[len(f.sets)-1]
}

// TestSizerFollowsLoad: the sizer starts with every thread, gives one up
// after a quiet second, takes it back within one window of a burst, and
// leaves every thread in place when it stops.
func TestSizerFollowsLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{at: time.Now()}
		var changes []string
		s := &Sizer{Max: 2, CPU: f.CPU, Set: f.Set, Every: Every, Changed: func(from, to int, busy float64) {
			changes = append(changes, time.Now().Format("05.000"))
		}}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		synctest.Wait()
		if got := f.last(); got != 2 {
			t.Fatalf("at start: %d threads, want 2", got)
		}
		f.load(0.1)
		time.Sleep(4 * Every)
		synctest.Wait()
		if got := f.last(); got != 2 {
			t.Fatalf("after 4 quiet windows: %d threads, want 2 still", got)
		}
		time.Sleep(Every)
		synctest.Wait()
		if got := f.last(); got != 1 {
			t.Fatalf("after 5 quiet windows: %d threads, want 1", got)
		}
		f.load(0.95)
		time.Sleep(Every)
		synctest.Wait()
		if got := f.last(); got != 2 {
			t.Fatalf("one window into a burst: %d threads, want 2", got)
		}
		if len(changes) != 2 {
			t.Errorf("Changed heard %d changes, want 2: %v", len(changes), changes)
		}
		cancel()
		<-done
		if got := f.last(); got != 2 {
			t.Errorf("after Run: %d threads, want 2 restored", got)
		}
	})
}

func TestNewLeavesAnOperatorsGOMAXPROCS(t *testing.T) {
	t.Setenv("GOMAXPROCS", "3")
	if s := New(); s != nil {
		t.Errorf("New with GOMAXPROCS=3 set: a sizer with ceiling %d; want none", s.Max)
	}
}

// TestProcessCPUCounts: the sizer's reading of the process's CPU time
// grows with work done, and never runs backwards.
func TestProcessCPUCounts(t *testing.T) {
	before, deadline := ProcessCPU(), time.Now().Add(10*time.Second)
	x := 0
	for i := 0; ProcessCPU()-before < 20*time.Millisecond && time.Now().Before(deadline); i++ {
		for j := range 100_000 {
			x += j ^ i
		}
	}
	after := ProcessCPU()
	if after-before < 20*time.Millisecond {
		t.Errorf("process CPU grew by %v over a busy loop (x=%d); want at least 20ms", after-before, x)
	}
}
