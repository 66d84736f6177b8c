package peers

import (
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sirupsen/logrus/hooks/test"
)

// answer gives each named parent n complete answers with head time d,
// spread over the last second.
func answer(r *Registry, d time.Duration, n int, names ...string) {
	for i := 0; i < n; i++ {
		for _, name := range names {
			observeAnswer(r, r.Get(name), AnswerOK, d, time.Now())
		}
		time.Sleep(time.Second / time.Duration(n))
	}
}

func share(p *Peer) float64 { return math.Round(p.Health().LatencyShare()*100) / 100 }

// TestShareScaledByPeers: a parent twice as slow as its peers keeps 0.39
// of its share, the others theirs; within a quarter it keeps all; the
// share returns as its times return; no outlier below the factor.
func TestShareScaledByPeers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := answersRegistry(t, 3, nil)
		answer(r, 10*time.Millisecond, 10, "b", "c")
		answer(r, 20*time.Millisecond, 10, "a")
		r.Judge(time.Now())
		if share(r.Get("a")) != 0.39 || share(r.Get("b")) != 1 || share(r.Get("c")) != 1 {
			t.Fatalf("shares a %v b %v c %v; want 0.39 1 1", share(r.Get("a")), share(r.Get("b")), share(r.Get("c")))
		}
		if r.Get("a").Health().Outlier() || r.Get("a").Health().Suspect() {
			t.Fatal("twice as slow, below outlier_factor 3: an outlier")
		}
		// Its times return: the old ones leave the window.
		answer(r, 11*time.Millisecond, 10, "a", "b", "c")
		time.Sleep(9 * time.Second)
		answer(r, 11*time.Millisecond, 10, "a", "b", "c")
		r.Judge(time.Now())
		if share(r.Get("a")) != 1 {
			t.Fatalf("back to its peers' times: share %v", share(r.Get("a")))
		}
		// Off: every share is whole.
		off := answersRegistry(t, 3, func(c *Config) { c.RelativeLatency = false })
		answer(off, 10*time.Millisecond, 10, "b", "c")
		answer(off, 20*time.Millisecond, 10, "a")
		off.Judge(time.Now())
		if share(off.Get("a")) != 1 {
			t.Fatalf("relative_latency off: share %v", share(off.Get("a")))
		}
	})
}

// TestSlowOriginEverywhereShiftsNothing: every parent equally slow (an
// origin slow behind all of them): every share whole, no outlier.
func TestSlowOriginEverywhereShiftsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := answersRegistry(t, 3, nil)
		answer(r, 600*time.Millisecond, 10, "a", "b", "c")
		r.Judge(time.Now())
		for _, p := range r.Peers() {
			if share(p) != 1 || p.Health().Outlier() || p.Health().Suspect() {
				t.Fatalf("%s: share %v outlier %v; an origin slow everywhere shifted it", p.Name(), share(p), p.Health().Outlier())
			}
		}
	})
}

// TestOutlierFactor: a parent above outlier_factor x its peers' median is
// suspect with cause outlier, probed over HTTP; a probe still too slow
// keeps it so without counting an answer failure; one back within the
// factor brings it back with a fresh window. max_answer_dead caps how
// many parents may be out.
func TestOutlierFactor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := answersRegistry(t, 3, nil)
		answer(r, time.Millisecond, 10, "b", "c")
		answer(r, 40*time.Millisecond, 10, "a")
		r.Judge(time.Now())
		a := r.Get("a")
		if !a.Health().Outlier() || !a.Health().Suspect() || a.Health().ProbeKind() != "http" {
			t.Fatalf("a 40x slower: outlier %v suspect %v probe %s", a.Health().Outlier(), a.Health().Suspect(), a.Health().ProbeKind())
		}
		h := a.Health().History()
		if last := h[len(h)-1]; last.Cause != CauseOutlier || last.To != "suspect" {
			t.Fatalf("history %+v; want cause outlier", last)
		}
		if b := a.Health().OutlierBound(); b != outlierProbeFloor {
			t.Fatalf("probe bound %v; want the floor (3 x 1ms is under it)", b)
		}
		for i := 0; i < 10; i++ {
			observeHTTPProbe(r, a, false, nil, AnswerLate, time.Now())
		}
		if !a.Health().Outlier() || a.Health().AnswerFailures() != 0 || a.Health().State() != Alive {
			t.Fatalf("late probes: outlier %v, answer failures %d, %v; want an outlier still, nothing counted", a.Health().Outlier(), a.Health().AnswerFailures(), a.Health().State())
		}
		observeHTTPProbe(r, a, true, nil, AnswerOK, time.Now())
		if a.Health().Outlier() || a.Health().Suspect() || a.Health().Snapshot().RecentHeadMs != 0 {
			t.Fatalf("a probe within the factor: outlier %v suspect %v recent %v", a.Health().Outlier(), a.Health().Suspect(), a.Health().Snapshot().RecentHeadMs)
		}

		// Four parents, three slow, max_answer_dead 25%: one out at most.
		r4 := answersRegistry(t, 4, func(c *Config) { c.MaxAnswerDead = 0.25 })
		answer(r4, time.Millisecond, 10, "a")
		answer(r4, time.Millisecond, 10, "b")
		answer(r4, 50*time.Millisecond, 10, "c", "d")
		r4.Judge(time.Now())
		out := 0
		for _, p := range r4.Peers() {
			if p.Health().Outlier() {
				out++
			}
		}
		if out != 1 {
			t.Fatalf("%d outliers; max_answer_dead 25%% of 4 allows 1", out)
		}
	})
}

// TestCompareWithinRouteAndTier: parents of different tiers, or of
// routes they do not share, are not compared.
func TestCompareWithinRouteAndTier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := DefaultConfig()
		log, _ := test.NewNullLogger()
		r, err := New(Options{Health: h, ConnectTimeout: time.Second, ReadTimeout: time.Minute, Log: log}, []Spec{
			{Name: "a", Host: "127.0.0.1", Port: 1}, {Name: "b", Host: "127.0.0.1", Port: 2},
			{Name: "c", Host: "127.0.0.1", Port: 3, Tier: 1},
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range r.Peers() {
			r.Observe(p, Outcome{At: time.Now(), RTT: time.Millisecond, Probe: true})
		}
		answer(r, time.Millisecond, 10, "a", "b")
		answer(r, 50*time.Millisecond, 10, "c") // a backup tier, far away
		r.Judge(time.Now())
		if c := r.Get("c"); c.Health().Outlier() || share(c) != 1 {
			t.Fatalf("a parent alone in its tier was judged: outlier %v share %v", c.Health().Outlier(), share(c))
		}
	})
}

// TestFewMillisecondsAreNoise: on loopback a parent at 4.5 ms beside
// peers at 1.4 ms is three times as slow, but 3 ms is scheduling noise:
// it keeps its whole share and is no outlier.
func TestFewMillisecondsAreNoise(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := answersRegistry(t, 3, nil)
		answer(r, 1400*time.Microsecond, 10, "b", "c")
		answer(r, 4500*time.Microsecond, 10, "a")
		r.Judge(time.Now())
		if share(r.Get("a")) != 1 || r.Get("a").Health().Outlier() {
			t.Fatalf("a: share %v, outlier %v; want 1, no outlier", share(r.Get("a")), r.Get("a").Health().Outlier())
		}
	})
}

// TestSmallDifferenceIsNoSuspicion: a parent at 20 ms beside peers at
// 5.7 ms (what a busy host measured of three equal parents) is 3.5 times
// as slow, past outlier_factor, but 14 ms is no slowness a client
// notices: it is never suspect (its share is scaled down as before). A
// parent 40 ms slower than its peers is an outlier still.
func TestSmallDifferenceIsNoSuspicion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := answersRegistry(t, 3, nil)
		answer(r, 5700*time.Microsecond, 10, "b", "c")
		answer(r, 20*time.Millisecond, 10, "a")
		r.Judge(time.Now())
		if a := r.Get("a"); a.Health().Outlier() || a.Health().Suspect() || share(a) >= 1 {
			t.Fatalf("a at 20 ms beside 5.7 ms: outlier %v, suspect %v, share %v; want neither, and a share below 1", a.Health().Outlier(), a.Health().Suspect(), share(a))
		}
		slow := answersRegistry(t, 3, nil)
		answer(slow, 5700*time.Microsecond, 10, "b", "c")
		answer(slow, 45700*time.Microsecond, 10, "a")
		slow.Judge(time.Now())
		if a := slow.Get("a"); !a.Health().Outlier() {
			t.Fatalf("a 40 ms slower than its peers: outlier %v, share %v; want an outlier", a.Health().Outlier(), share(a))
		}
	})
}

// outlierA is three parents, a 60 times as slow as b and c: an outlier.
// It runs inside a synctest bubble (a second of answers).
func outlierA(t *testing.T) (*Registry, *Peer) {
	t.Helper()
	r := answersRegistry(t, 3, nil)
	a := r.Get("a")
	answer(r, time.Millisecond, 10, "b", "c")
	answer(r, 60*time.Millisecond, 10, "a")
	r.Judge(time.Now())
	if !a.Health().Outlier() {
		t.Fatal("a 60x slower: no outlier")
	}
	return r, a
}

// TestOutlierProbationAndHold: a parent revived by a fast probe comes
// back on half its share until its answers are measured; when its
// answers are slow again at once (its probe cannot see its slow way to
// the origin, as with a Squid answering OPTIONS itself), its next revival
// is held back 2 s, then 4 s, and it never flaps back to a whole share.
func TestOutlierProbationAndHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, a := outlierA(t)
		observeHTTPProbe(r, a, true, nil, AnswerOK, time.Now())
		r.Judge(time.Now())
		if a.Health().Outlier() || share(a) != probationShare {
			t.Fatalf("revived: outlier %v, share %v; want a probation share of %v", a.Health().Outlier(), share(a), probationShare)
		}
		for hold := 2 * time.Second; hold <= 4*time.Second; hold *= 2 {
			answer(r, time.Millisecond, 5, "b", "c")
			answer(r, 60*time.Millisecond, 5, "a")
			r.Judge(time.Now())
			if !a.Health().Outlier() {
				t.Fatal("slow again after its revival: no outlier")
			}
			marked := time.Now()
			time.Sleep(hold - 100*time.Millisecond)
			observeHTTPProbe(r, a, true, nil, AnswerOK, time.Now())
			if !a.Health().Outlier() {
				t.Fatalf("revived %v after a strike; want held back %v", time.Since(marked), hold)
			}
			time.Sleep(100 * time.Millisecond)
			observeHTTPProbe(r, a, true, nil, AnswerOK, time.Now())
			if a.Health().Outlier() {
				t.Fatalf("still held %v after a strike; want revived after %v", time.Since(marked), hold)
			}
		}
		// Measured fast again: the whole share.
		answer(r, time.Millisecond, 10, "a", "b", "c")
		r.Judge(time.Now())
		if share(a) != 1 {
			t.Fatalf("fast again: share %v", share(a))
		}
	})
}

// TestShiftAfterRevivalIsShared: a parent revived from being an outlier
// starts a fresh window; when every parent then turns 40 ms slower (the
// origin), they are compared over that same period, so the revived one
// is not the first to look slow. An outlier's probe bound follows its
// peers' times.
func TestShiftAfterRevivalIsShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, a := outlierA(t)
		answer(r, time.Millisecond, 40, "b", "c") // 4 s more of fast peers
		observeHTTPProbe(r, a, true, nil, AnswerOK, time.Now())
		answer(r, time.Millisecond, 10, "a", "b", "c")
		r.Judge(time.Now())
		for i := 0; i < 30; i++ { // then every parent 40 ms, judged every 250 ms
			for _, n := range []string{"a", "b", "c"} {
				observeAnswer(r, r.Get(n), AnswerOK, 41*time.Millisecond, time.Now())
			}
			time.Sleep(250 * time.Millisecond)
			r.Judge(time.Now())
			if a.Health().Outlier() {
				t.Fatalf("step %d: a is an outlier while every parent is alike (a %vms, b %vms)", i, a.Health().Snapshot().RecentHeadMs, r.Get("b").Health().Snapshot().RecentHeadMs)
			}
		}
		if share(a) != 1 {
			t.Fatalf("a's share %v while every parent is alike", share(a))
		}

		r2, _ := outlierA(t)
		answer(r2, 50*time.Millisecond, 30, "b", "c")
		r2.Judge(time.Now())
		if b := r2.Get("a").Health().OutlierBound(); b != 150*time.Millisecond {
			t.Fatalf("probe bound %v with peers now at 50ms; want 3 x 50ms", b)
		}
	})
}
