package e2e

// Parents judged against each other through the binary (issue 43,
// contract section 21): a parent merely slower than its siblings loses
// its share (and, far slower, is an outlier), gets it back when fast
// again; an origin slow behind every parent moves nothing; hedges stay
// within hedge_budget under a tail every parent shares; and peerd's own
// stalls (SIGSTOP) are blamed on no parent.

import (
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

type relStatus struct {
	State        string  `json:"state"`
	Suspect      bool    `json:"suspect"`
	Outlier      bool    `json:"outlier"`
	LatencyShare float64 `json:"latency_share"`
	RecentHeadMs float64 `json:"recent_head_ms"`
	DeathsTotal  int     `json:"deaths_total"`
	HedgedTotal  int64   `json:"hedged_total"`
}

func (p *peerd) rel(name string) relStatus {
	p.t.Helper()
	var st relStatus
	p.adminJSON("GET", "/peers/"+name, "", &st)
	return st
}

// shares sends rate GET/s for d and returns each parent's part of the
// GETs they received, and what the clients saw.
func shares(p *peerd, rate int, d time.Duration, ps map[string]*fakeParent, slowEvery int, slowDelay time.Duration) (map[string]float64, loadResult) {
	before := map[string]int{}
	for n, f := range ps {
		before[n] = f.requests("GET")
	}
	r := paced(p, rate, d, slowEvery, slowDelay)
	total := 0
	got := map[string]int{}
	for n, f := range ps {
		got[n] = f.requests("GET") - before[n]
		total += got[n]
	}
	out := map[string]float64{}
	for n := range ps {
		if total > 0 {
			out[n] = float64(got[n]) / float64(total)
		}
	}
	return out, r
}

func TestRelativeLatencyPhases(t *testing.T) {
	a, b, c := newFakeParent(t, "a"), newFakeParent(t, "b"), newFakeParent(t, "c")
	ps := map[string]*fakeParent{"a": a, "b": b, "c": c}
	cfg := withProxy(baseConfig, `read_timeout = "10s"`) + grayConfig + policy("round-robin") + peerBlock("", a, b, c)
	p := startPeerd(t, cfg)
	if r := paced(p, 100, 1500*time.Millisecond, 0, 0); r.errs != 0 {
		t.Fatalf("warm-up: %d errors (%s)", r.errs, r.firstErr)
	}
	noErrors := func(t *testing.T, r loadResult) {
		t.Helper()
		if r.errs != 0 {
			t.Errorf("%d client errors (first: %s); want none", r.errs, r.firstErr)
		}
	}
	deaths := func() int { return p.rel("a").DeathsTotal + p.rel("b").DeathsTotal + p.rel("c").DeathsTotal }

	t.Run("slow", func(t *testing.T) {
		a.setMode("delay:40ms")
		_, r1 := shares(p, 40, 7*time.Second, ps, 0, 0)
		s, r2 := shares(p, 40, 7*time.Second, ps, 0, 0)
		st := p.rel("a")
		t.Logf("a 40 ms late: its share of the last 7 s %.1f%%; a %+v", s["a"]*100, st)
		noErrors(t, r1)
		noErrors(t, r2)
		if s["a"] > 0.10 {
			t.Errorf("a has %.1f%% of the requests after 7 s; want at most 10%%", s["a"]*100)
		}
		if !st.Outlier || st.State != "alive" {
			t.Errorf("a = %+v; want an outlier, alive", st)
		}
	})
	t.Run("back", func(t *testing.T) {
		a.setMode("")
		s, r := shares(p, 40, 7*time.Second, ps, 0, 0)
		t.Logf("a fast again: its share of the next 7 s %.1f%%; a %+v", s["a"]*100, p.rel("a"))
		noErrors(t, r)
		if s["a"] < 0.22 {
			t.Errorf("a has %.1f%% of the requests within 7 s of being fast again; want at least 22%%", s["a"]*100)
		}
	})
	t.Run("control", func(t *testing.T) {
		d0 := deaths()
		for _, f := range ps {
			f.setMode("delay:40ms")
		}
		_, r1 := shares(p, 40, 7*time.Second, ps, 0, 0)
		s, r2 := shares(p, 40, 7*time.Second, ps, 0, 0)
		t.Logf("all 40 ms late: shares %v", s)
		noErrors(t, r1)
		noErrors(t, r2)
		for n, sh := range s {
			if sh < 0.22 || sh > 0.45 {
				t.Errorf("%s has %.1f%%; want 22-45%% when every parent is alike", n, sh*100)
			}
			if st := p.rel(n); st.Outlier || st.State != "alive" {
				t.Errorf("%s = %+v; none is dead or an outlier", n, st)
			}
		}
		if deaths() != d0 {
			t.Errorf("%d deaths", deaths()-d0)
		}
		for _, f := range ps {
			f.setMode("")
		}
	})
	t.Run("tail", func(t *testing.T) {
		d0 := deaths()
		h0 := p.rel("a").HedgedTotal + p.rel("b").HedgedTotal + p.rel("c").HedgedTotal
		_, r := shares(p, 40, 14*time.Second, ps, 10, 600*time.Millisecond)
		hedged := p.rel("a").HedgedTotal + p.rel("b").HedgedTotal + p.rel("c").HedgedTotal - h0
		t.Logf("every parent 10%% at 600 ms: %d requests, %d hedged (%.1f%%)", r.n, hedged, 100*float64(hedged)/float64(r.n))
		noErrors(t, r)
		if float64(hedged) > 0.03*float64(r.n) {
			t.Errorf("%d of %d requests hedged; want at most 3%%", hedged, r.n)
		}
		if deaths() != d0 {
			t.Errorf("%d deaths under a tail every parent shares", deaths()-d0)
		}
	})
	t.Run("stall", func(t *testing.T) {
		d0 := deaths()
		stop := make(chan struct{})
		var stops atomic.Int64
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(700 * time.Millisecond):
				}
				p.Cmd.Process.Signal(syscall.SIGSTOP)
				time.Sleep(300 * time.Millisecond)
				p.Cmd.Process.Signal(syscall.SIGCONT)
				stops.Add(1)
			}
		}()
		_, r := shares(p, 40, 15*time.Second, ps, 0, 0)
		close(stop)
		time.Sleep(400 * time.Millisecond)
		p.Cmd.Process.Signal(syscall.SIGCONT)
		t.Logf("peerd stopped 300 ms of every second %d times: %d requests, %d errors", stops.Load(), r.n, r.errs)
		noErrors(t, r)
		if deaths() != d0 {
			t.Errorf("%d deaths while peerd itself stalled", deaths()-d0)
		}
		for _, n := range []string{"a", "b", "c"} {
			if st := p.rel(n); st.Outlier || st.State != "alive" {
				t.Errorf("%s = %+v after peerd's stalls", n, st)
			}
		}
	})
}
