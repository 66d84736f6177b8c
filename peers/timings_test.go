package peers

import (
	"errors"
	"testing"
	"time"
)

// fakeTimings records what the histograms would.
type fakeTimings struct {
	seen      map[string][]float64
	forgotten []string
}

type fakeSeries struct {
	t   *fakeTimings
	key string
}

func (s fakeSeries) Observe(v float64) { s.t.seen[s.key] = append(s.t.seen[s.key], v) }

func (f *fakeTimings) For(peer string) (Timing, Timing) {
	return fakeSeries{f, peer + " connect"}, fakeSeries{f, peer + " head"}
}

func (f *fakeTimings) Forget(peer string) { f.forgotten = append(f.forgotten, peer) }

// TestTimingsSeeConnectsAndHeads: every successful connect and every
// answered head reach the peer's series; a failed connect or a failed
// answer does not; a peer that leaves the config has its series dropped.
func TestTimingsSeeConnectsAndHeads(t *testing.T) {
	r, _ := newTestRegistry(t, 3, Spec{Name: "a", Host: "10.0.0.1", Port: 3128}, Spec{Name: "b", Host: "10.0.0.2", Port: 3128})
	ft := &fakeTimings{seen: map[string][]float64{}}
	r.SetTimings(ft)
	a := r.Get("a")
	now := time.Now()
	r.Observe(a, Outcome{At: now, RTT: 3 * time.Millisecond, Probe: true})
	r.Observe(a, Outcome{At: now, Err: errors.New("connection refused")})
	observeAnswer(r, a, AnswerOK, 40*time.Millisecond, now)
	observeAnswer(r, a, AnswerTimeout, 0, now)
	if got := ft.seen["a connect"]; len(got) != 1 || got[0] != 0.003 {
		t.Fatalf("a's connects: %v; want [0.003]", got)
	}
	if got := ft.seen["a head"]; len(got) != 1 || got[0] != 0.04 {
		t.Fatalf("a's heads: %v; want [0.04]", got)
	}
	if err := r.Reconcile(*r.opts.Load(), []Spec{{Name: "a", Host: "10.0.0.1", Port: 3128}}); err != nil {
		t.Fatal(err)
	}
	if len(ft.forgotten) != 1 || ft.forgotten[0] != "b" {
		t.Fatalf("forgotten %v; want [b]", ft.forgotten)
	}
}
