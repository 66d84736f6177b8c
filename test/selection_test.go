package e2e

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

func TestWeightedRoundRobinSplit(t *testing.T) {
	a := newFakeParent(t, "a")
	b := newFakeParent(t, "b")
	c := newFakeParent(t, "c")
	p := startPeerd(t, baseConfig+"[selection]\npolicy = \"weighted-round-robin\"\n"+
		peerBlock("weight = 3", a)+peerBlock("weight = 1", b, c))
	cl := p.client()
	counts := map[string]int{}
	for i := 0; i < 500; i++ {
		r := do(cl, "GET", fmt.Sprintf("http://o.test/w%d", i), "")
		if r.status != 200 {
			t.Fatalf("request %d: %s", i, r)
		}
		counts[r.from]++
	}
	for name, want := range map[string]float64{"a": 0.6, "b": 0.2, "c": 0.2} {
		if got := float64(counts[name]) / 500; math.Abs(got-want) > 0.02 {
			t.Errorf("%s share %.3f; want %.1f", name, got, want)
		}
	}
}

func TestCARPStickiness(t *testing.T) {
	t.Parallel()
	fs := []loopbackPeer{newFakeParent(t, "a"), newFakeParent(t, "b"), newFakeParent(t, "c")}
	p := startPeerd(t, baseConfig+"[selection]\npolicy = \"carp\"\n"+peerBlock("", fs...))
	cl := p.client()
	owner := map[string]string{}
	used := map[string]bool{}
	for round := 0; round < 3; round++ {
		for i := 0; i < 30; i++ {
			u := fmt.Sprintf("http://o.test/obj/%d", i)
			r := do(cl, "GET", u, "")
			if round == 0 {
				owner[u] = r.from
				used[r.from] = true
			} else if r.from != owner[u] {
				t.Fatalf("%s went to %s, earlier to %s", u, r.from, owner[u])
			}
		}
	}
	if len(used) != 3 {
		t.Fatalf("carp used %d parents for 30 URLs; want all 3", len(used))
	}
}

// TestRefuseThenBlackholeThenBack: a parent that first refuses, then drops
// SYNs, then comes back. Death is detected, no request reaches it while
// dead, and a probe revives it within probe_max_interval of its return.
func TestRefuseThenBlackholeThenBack(t *testing.T) {
	a := newFakeParent(t, "a")
	b := newFakeParent(t, "b")
	p := startPeerd(t, strings.Replace(baseConfig, `connect_timeout = "2s"`, `connect_timeout = "300ms"`, 1)+health(2, "200ms", "600ms")+policy("round-robin")+peerBlock("", a, b))
	cl := p.client()
	a.stop() // refuses
	for i := 0; i < 4; i++ {
		if r := do(cl, "GET", "http://o.test/r", ""); r.status != 200 {
			t.Fatalf("%s", r)
		}
	}
	waitFor(t, "a dead", 5*time.Second, func() bool { return p.peer("a").State == "dead" })
	// Now the address drops SYNs: probes time out; still dead.
	failed := p.peer("a").ProbeFailuresTotal
	hole := blackholeAt(t, a.addr)
	// Two probes time out against the black hole; a stays dead.
	waitFor(t, "two more failed probes of a", 10*time.Second, func() bool { return p.peer("a").ProbeFailuresTotal >= failed+2 })
	if st := p.peer("a"); st.State != "dead" || st.DeathsTotal != 1 {
		t.Fatalf("a = %+v", st)
	}
	for i := 0; i < 10; i++ {
		if r := do(cl, "GET", "http://o.test/h", ""); r.status != 200 || r.from != "b" {
			t.Fatalf("%s", r)
		}
	}
	hole() // back for real
	before := len(a.records())
	a.restart()
	back := time.Now()
	waitFor(t, "a revived", 5*time.Second, func() bool { return p.peer("a").State == "alive" })
	if d := time.Since(back); d > 600*time.Millisecond+300*time.Millisecond+500*time.Millisecond {
		t.Fatalf("revived %v after its return; want within probe_max_interval + probe timeout", d)
	}
	recs := a.records()[before:]
	if len(recs) == 0 || recs[0].Bytes != 0 {
		t.Fatalf("the first connection after the return was not a probe: %+v", recs)
	}
}
