// Package procs sizes the Go runtime's worker threads (GOMAXPROCS) to the
// load: one while the process needs less than most of a core, more as soon
// as it needs them, up to the default the runtime chose at start (one per
// core, or the cgroup's CPU limit).
//
// Why: peerd runs a goroutine per connection, and with more than one worker
// thread every request that wakes a goroutine can wake a second thread to
// run it, and idle threads spin looking for work to steal. Below a core's
// worth of load that buys nothing and costs CPU: in the bench (README,
// "Threads follow the load"; each figure the median of three runs, with
// their range), peerd cost 0.83 × (0.83–0.97) and 0.77 × (0.76–0.86) the
// CPU per request of the same binary with two fixed threads at
// saturation in two sets, 0.77 × (0.75–0.90) and 0.83 × (0.81–0.89) at
// 3,000 req/s, and 0.88 × (0.86–0.97) at 9,000, at the same req/s. An
// event loop gets the same effect by having one thread until it is busy;
// this gets it without giving up the goroutine model.
//
// An operator who sets GOMAXPROCS in the environment gets exactly that, as
// with any Go program: the sizer does not run.
//
// The ceiling is read once, at start. Go (1.25 and later) follows a cgroup
// CPU limit that changes while a program runs, but only for a program that
// never sets GOMAXPROCS itself; this one does, so a limit changed later
// takes effect at the next restart or binary upgrade.
//
// This file holds the decision (next) and the loop that samples the
// process's CPU time and applies it.
package procs

import (
	"context"
	"math"
	"runtime"
	"syscall"
	"time"
)

// The lines the decision draws, as shares of the worker threads in use.
const (
	// upAt: a process busy for this share of its threads gets more at once.
	upAt = 0.85
	// downAt: a process that would keep one thread fewer busy below this
	// share of them, for need windows in a row, gives one up. Going from
	// two threads to one at under 0.9 cores lands at about 0.75 in the
	// bench (one thread costs about 0.82 × two per request), well inside
	// upAt. Where one thread is no cheaper (work that is all CPU), it can
	// land above upAt and be raised again: each such raise doubles need,
	// up to maxNeed, so the count changes at most about once a minute.
	downAt = 0.9
	// downAfter is need at first: a second of quiet at the default Every.
	downAfter = 5
	// maxNeed: a minute of quiet at the default Every.
	maxNeed = 300
	// soon: a raise this many windows after a lowering undoes it (5 s).
	soon = 25
	// perThread is the share of each thread a raise aims for, so that one
	// step covers a burst: busy 3.5 threads of 4 asks for 6.
	perThread = 0.6
)

// Every is how often the loop samples; a burst waits at most this long for
// its threads.
const Every = 200 * time.Millisecond

// state is what the decision carries from one window to the next.
type state struct {
	cur   int  // worker threads in use
	quiet int  // windows in a row that would allow one fewer
	need  int  // quiet windows a lowering needs
	since int  // windows since the last change
	down  bool // the last change was a lowering
}

func start(top int) state { return state{cur: top, need: downAfter} }

// next returns the state for the coming window, given the ceiling (top)
// and how many cores the process kept busy over the last window (busy).
func (s state) next(top int, busy float64) state {
	s.since++
	if s.down && s.since >= maxNeed {
		s.need = downAfter // the last lowering held for a minute
	}
	switch {
	case s.cur > top:
		return s.change(top, false)
	case s.cur < top && busy >= upAt*float64(s.cur):
		if s.down && s.since <= soon {
			s.need = min(maxNeed, 2*s.need)
		}
		want := int(math.Ceil(busy / perThread))
		return s.change(min(top, max(s.cur+1, want)), false)
	case s.cur > 1 && busy < downAt*float64(s.cur-1):
		s.quiet++
		if s.quiet >= s.need {
			return s.change(s.cur-1, true)
		}
		return s
	}
	s.quiet = 0
	return s
}

func (s state) change(to int, down bool) state {
	s.cur, s.quiet, s.since, s.down = to, 0, 0, down
	return s
}

// Sizer applies next every Every. Its fields are what it touches outside
// itself, so that a test can drive it on a fake clock and CPU.
type Sizer struct {
	Max   int                  // the ceiling: the runtime's default at start
	CPU   func() time.Duration // the process's user+system CPU time so far
	Set   func(int)            // applies a thread count
	Every time.Duration
	// Changed, if set, hears each change with the load that caused it.
	Changed func(from, to int, busy float64)
}

// New returns the sizer for this process, or nil when GOMAXPROCS is set in
// the environment or there is only one thread to give.
func New() *Sizer {
	if v, set := syscall.Getenv("GOMAXPROCS"); set && v != "" {
		return nil
	}
	top := runtime.GOMAXPROCS(0)
	if top <= 1 {
		return nil
	}
	return &Sizer{Max: top, CPU: ProcessCPU, Set: func(n int) { runtime.GOMAXPROCS(n) }, Every: Every}
}

// Run samples and resizes until ctx ends, starting from Max: a process
// that starts under load (a binary upgrade's new one) has every thread
// from the first request, and an idle one gives them up within a second or
// so. At the end it restores Max.
func (s *Sizer) Run(ctx context.Context) {
	st := start(s.Max)
	s.Set(st.cur)
	defer s.Set(s.Max)
	t := time.NewTicker(s.Every)
	defer t.Stop()
	last, lastCPU := time.Now(), s.CPU()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			used := s.CPU()
			wall := now.Sub(last)
			if wall <= 0 {
				continue
			}
			busy := float64(used-lastCPU) / float64(wall)
			last, lastCPU = now, used
			was := st.cur
			st = st.next(s.Max, busy)
			if st.cur != was {
				s.Set(st.cur)
				if s.Changed != nil {
					s.Changed(was, st.cur, busy)
				}
			}
		}
	}
}

// ProcessCPU is the user and system time of every thread of the process.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
