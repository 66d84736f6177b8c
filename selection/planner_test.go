package selection

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/peerd/peerd/peers"
	"github.com/sirupsen/logrus/hooks/test"
)

var errRefused = errors.New("refused")

type fixture struct {
	reg *peers.Registry
}

// newFixture registers peers from compact specs: "name" is a parent,
// "name:s" a sibling, "name:d" a default parent, "name:w5" weight 5. All
// start alive.
func newFixture(t testing.TB, specs ...string) *fixture {
	t.Helper()
	var ss []peers.Spec
	for i, s := range specs {
		parts := strings.Split(s, ":")
		sp := peers.Spec{Name: parts[0], Host: "127.0.0.1", Port: 1000 + i}
		for _, o := range parts[1:] {
			switch {
			case o == "s":
				sp.Type = peers.Sibling
			case o == "d":
				sp.Default = true
			case strings.HasPrefix(o, "w"):
				fmt.Sscan(o[1:], &sp.Weight)
			case strings.HasPrefix(o, "m"):
				fmt.Sscan(o[1:], &sp.MaxConn)
			case o == "icp":
				sp.ICPPort = 3130
			case strings.HasPrefix(o, "t"):
				fmt.Sscan(o[1:], &sp.Tier)
			}
		}
		ss = append(ss, sp)
	}
	log, _ := test.NewNullLogger()
	h := peers.DefaultConfig()
	h.ConnectFailLimit = 1
	reg, err := peers.New(peers.Options{Health: h, Log: log}, ss)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{reg: reg}
	for _, p := range reg.Peers() {
		f.revive(p.Name())
	}
	return f
}

func (f *fixture) kill(name string) {
	f.reg.Observe(f.reg.Get(name), peers.Outcome{At: time.Now(), Err: errRefused})
}

func (f *fixture) revive(name string) {
	f.reg.Observe(f.reg.Get(name), peers.Outcome{At: time.Now(), Probe: true})
}

func walkAll(pl *Planner, r Request) []string {
	plan := pl.Plan(r)
	var out []string
	for {
		h, ok := plan.Next()
		if !ok {
			return out
		}
		if h.IsDirect() {
			out = append(out, "DIRECT")
		} else {
			out = append(out, h.Peer.Name())
		}
	}
}

func first(pl *Planner, r Request) string {
	plan := pl.Plan(r)
	h, ok := plan.Next()
	if !ok {
		return ""
	}
	if h.IsDirect() {
		return "DIRECT"
	}
	return h.Peer.Name()
}

var get = Request{Method: "GET", URL: "http://example.com/", ClientIP: "10.0.0.1"}

func TestPlanOrder(t *testing.T) {
	f := newFixture(t, "p1", "s1:s", "d1:d", "p2", "s2:s")
	for _, tc := range []struct {
		name   string
		direct Direct
		method string
		want   string
	}{
		{"GET allow", DirectAllow, "GET", "[s1 s2 p1 p2 d1 DIRECT]"},
		{"POST skips siblings", DirectAllow, "POST", "[p1 p2 d1 DIRECT]"},
		{"CONNECT skips siblings", DirectAllow, "CONNECT", "[p1 p2 d1 DIRECT]"},
		{"never", DirectNever, "GET", "[s1 s2 p1 p2 d1]"},
		{"prefer", DirectPrefer, "GET", "[s1 s2 DIRECT p1 p2 d1]"},
		{"always", DirectAlways, "GET", "[DIRECT]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl := New(f.reg, Options{Policy: FirstUp, Direct: tc.direct})
			r := get
			r.Method = tc.method
			if got := fmt.Sprint(walkAll(pl, r)); got != tc.want {
				t.Fatalf("plan = %s; want %s", got, tc.want)
			}
		})
	}
}

func TestIneligiblePeersNeverInPlan(t *testing.T) {
	f := newFixture(t, "p1", "p2:m1", "p3", "p4", "p5")
	f.kill("p1")
	f.reg.Get("p2")
	if !f.reg.BeginRequest(f.reg.Get("p2"), time.Now()) { // p2 now at max_conn 1
		t.Fatal("BeginRequest")
	}
	f.reg.SetAdminState("p3", peers.Drain)
	f.reg.SetAdminState("p4", peers.Maintenance)
	pl := New(f.reg, Options{Policy: FirstUp, Direct: DirectNever})
	if got := fmt.Sprint(walkAll(pl, get)); got != "[p5]" {
		t.Fatalf("plan = %s; want [p5]", got)
	}
	f.kill("p5")
	if got := walkAll(pl, get); len(got) != 0 {
		t.Fatalf("plan = %v with every peer ineligible; want empty (never a dead peer)", got)
	}
}

func TestLivenessCheckedAtEachStep(t *testing.T) {
	f := newFixture(t, "p1", "p2", "p3")
	pl := New(f.reg, Options{Policy: FirstUp, Direct: DirectNever})
	plan := pl.Plan(get)
	h, _ := plan.Next()
	if h.Peer.Name() != "p1" {
		t.Fatalf("first = %s", h.Peer.Name())
	}
	f.kill("p2") // dies after the plan was built
	h, _ = plan.Next()
	if h.Peer.Name() != "p3" {
		t.Fatalf("second = %s; want p3 (p2 died meanwhile)", h.Peer.Name())
	}
}

func TestSuspectPeersSortBehindHealthy(t *testing.T) {
	f := newFixture(t, "p1", "p2", "p3")
	f.reg.Get("p1")
	// One failure below the limit (limit is 1 here, so use a peer with a
	// higher limit): rebuild with limit 3.
	log, _ := test.NewNullLogger()
	h := peers.DefaultConfig()
	h.ConnectFailLimit = 3
	reg, _ := peers.New(peers.Options{Health: h, Log: log}, []peers.Spec{
		{Name: "p1", Host: "h", Port: 1}, {Name: "p2", Host: "h", Port: 2}, {Name: "p3", Host: "h", Port: 3}})
	for _, p := range reg.Peers() {
		reg.Observe(p, peers.Outcome{At: time.Now(), Probe: true})
	}
	reg.Observe(reg.Get("p1"), peers.Outcome{At: time.Now(), Err: errRefused})
	pl := New(reg, Options{Policy: FirstUp, Direct: DirectNever})
	if got := fmt.Sprint(walkAll(pl, get)); got != "[p2 p3 p1]" {
		t.Fatalf("plan = %s; want the suspect p1 last", got)
	}
	// A peer that turns suspect mid-plan is not returned twice.
	plan := pl.Plan(get)
	hop, _ := plan.Next()
	reg.Observe(hop.Peer, peers.Outcome{At: time.Now(), Err: errRefused})
	var rest []string
	for h, ok := plan.Next(); ok; h, ok = plan.Next() {
		rest = append(rest, h.Peer.Name())
	}
	if fmt.Sprint(rest) != "[p3 p1]" {
		t.Fatalf("rest = %v; want [p3 p1]", rest)
	}
}

func TestMaxTriesCapsTheWalk(t *testing.T) {
	f := newFixture(t, "p1", "p2", "p3", "p4")
	pl := New(f.reg, Options{Policy: FirstUp, Direct: DirectAllow, MaxTries: 2})
	if got := fmt.Sprint(walkAll(pl, get)); got != "[p1 p2]" {
		t.Fatalf("plan = %s; want [p1 p2]", got)
	}
}

func TestRoundRobinEvenness(t *testing.T) {
	f := newFixture(t, "a", "b", "c", "d")
	pl := New(f.reg, Options{Policy: RoundRobin, Direct: DirectNever})
	check := func(names []string, n int) {
		t.Helper()
		counts := map[string]int{}
		for i := 0; i < n; i++ {
			counts[first(pl, get)]++
		}
		lo, hi := math.MaxInt, 0
		for _, name := range names {
			lo, hi = min(lo, counts[name]), max(hi, counts[name])
		}
		if hi-lo > 1 || len(counts) != len(names) {
			t.Fatalf("counts %v over %v; want max-min <= 1", counts, names)
		}
	}
	check([]string{"a", "b", "c", "d"}, 1001)
	f.kill("b")
	check([]string{"a", "c", "d"}, 301)
	// The revived peer rejoins with its fair share, not a backlog.
	f.revive("b")
	check([]string{"a", "b", "c", "d"}, 41)
	// Fallbacks follow the rotation: a plan that starts at x goes on to
	// the parents after x, wrapping around.
	order := []string{"a", "b", "c", "d"}
	for i := 0; i < 8; i++ {
		plan := walkAll(pl, get)
		at := strings.Index("abcd", plan[0])
		want := append(append([]string{}, order[at:]...), order[:at]...)
		if fmt.Sprint(plan) != fmt.Sprint(want) {
			t.Fatalf("plan %v; want the rotation %v", plan, want)
		}
	}
}

func TestSmoothWeightedRoundRobin(t *testing.T) {
	f := newFixture(t, "a:w5", "b", "c")
	pl := New(f.reg, Options{Policy: WeightedRoundRobin, Direct: DirectNever})
	var seq []string
	for i := 0; i < 7; i++ {
		seq = append(seq, first(pl, get))
	}
	if got := strings.Join(seq, ","); got != "a,a,b,a,c,a,a" {
		t.Fatalf("sequence = %s; want a,a,b,a,c,a,a", got)
	}
	f2 := newFixture(t, "x:w3", "y", "z:w6")
	pl = New(f2.reg, Options{Policy: WeightedRoundRobin, Direct: DirectNever})
	counts := map[string]float64{}
	const n = 10000
	for i := 0; i < n; i++ {
		counts[first(pl, get)]++
	}
	for name, w := range map[string]float64{"x": 0.3, "y": 0.1, "z": 0.6} {
		if got := counts[name] / n; math.Abs(got-w) > 0.01 {
			t.Errorf("%s share = %.4f; want %.2f ± 0.01", name, got, w)
		}
	}
	// The WRR pick comes first; the others follow in config order.
	for i := 0; i < 10; i++ {
		got := walkAll(pl, get)
		var want []string
		for _, n := range []string{"x", "y", "z"} {
			if n != got[0] {
				want = append(want, n)
			}
		}
		if fmt.Sprint(got[1:]) != fmt.Sprint(want) {
			t.Fatalf("plan = %v; want %s then %v", got, got[0], want)
		}
	}
}

func TestHashPoliciesMoveOnlyTheDeadPeersShare(t *testing.T) {
	for _, tc := range []struct {
		policy Policy
		req    func(i int) Request
	}{
		{CARP, func(i int) Request { return Request{Method: "GET", URL: fmt.Sprintf("http://h/%d", i)} }},
		{SourceHash, func(i int) Request {
			return Request{Method: "GET", ClientIP: fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255)}
		}},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			f := newFixture(t, "a", "b", "c", "d", "e")
			pl := New(f.reg, Options{Policy: tc.policy, Direct: DirectNever})
			const n = 10000
			before := make([]string, n)
			counts := map[string]int{}
			for i := range before {
				before[i] = first(pl, tc.req(i))
				counts[before[i]]++
			}
			for name, c := range counts {
				if math.Abs(float64(c)/n-0.2) > 0.02 {
					t.Errorf("%s share %.3f; want 0.2 ± 0.02", name, float64(c)/n)
				}
			}
			f.kill("c")
			moved := 0
			for i := range before {
				after := first(pl, tc.req(i))
				if after != before[i] {
					moved++
					if before[i] != "c" {
						t.Fatalf("key %d moved from live %s to %s", i, before[i], after)
					}
				}
				if after == "c" {
					t.Fatal("dead peer chosen")
				}
			}
			if share := float64(moved) / n; math.Abs(share-0.2) > 0.02 {
				t.Errorf("moved %.3f of keys; want about 0.2", share)
			}
			// Same key, same parent, every time.
			for i := range before {
				if got := first(pl, tc.req(i)); got == "c" || (before[i] != "c" && got != before[i]) {
					t.Fatalf("key %d: %s, earlier %s", i, got, before[i])
				}
			}
		})
	}
}

func TestWeightedCARPShares(t *testing.T) {
	f := newFixture(t, "a:w1", "b:w2", "c:w3", "d:w4")
	pl := New(f.reg, Options{Policy: CARP, Direct: DirectNever})
	counts := map[string]float64{}
	const n = 20000
	for i := 0; i < n; i++ {
		counts[first(pl, Request{Method: "GET", URL: fmt.Sprintf("http://x/%d", i)})]++
	}
	for name, want := range map[string]float64{"a": 0.1, "b": 0.2, "c": 0.3, "d": 0.4} {
		if got := counts[name] / n; math.Abs(got-want) > 0.02 {
			t.Errorf("%s share %.3f; want %.1f ± 0.02", name, got, want)
		}
	}
}

// TestRandomInterleavings: whatever deaths, revivals, drains and plan walks
// interleave, no returned hop is ineligible at the moment it is returned,
// and no peer is returned twice by one plan.
func TestRandomInterleavings(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"p0", "p1:w3", "p2:d", "s0:s", "p3:m2", "p4", "s1:s"}
	f := newFixture(t, names...)
	ps := f.reg.Peers()
	for _, pol := range []Policy{FirstUp, RoundRobin, WeightedRoundRobin, CARP, SourceHash} {
		pl := New(f.reg, Options{Policy: pol, Direct: Direct(rng.IntN(4))})
		for step := 0; step < 3000; step++ {
			plan := pl.Plan(Request{Method: []string{"GET", "POST", "HEAD"}[rng.IntN(3)], URL: fmt.Sprint(rng.IntN(100)), ClientIP: fmt.Sprint(rng.IntN(50))})
			seen := map[*peers.Peer]bool{}
			for {
				// Mutate between steps of the walk.
				for k := rng.IntN(3); k > 0; k-- {
					p := ps[rng.IntN(len(ps))]
					switch rng.IntN(4) {
					case 0:
						f.kill(p.Name())
					case 1:
						f.revive(p.Name())
					case 2:
						f.reg.SetAdminState(p.Name(), peers.AdminState(rng.IntN(3)))
					case 3:
						f.reg.SetAdminState(p.Name(), peers.Enabled)
					}
				}
				h, ok := plan.Next()
				if !ok {
					break
				}
				if h.IsDirect() {
					continue
				}
				if !h.Peer.Health().Eligible() {
					t.Fatalf("%v: returned %s in state %v/%v", pol, h.Peer.Name(), h.Peer.Health().State(), h.Peer.Health().AdminState())
				}
				if seen[h.Peer] {
					t.Fatalf("%v: %s returned twice", pol, h.Peer.Name())
				}
				seen[h.Peer] = true
			}
		}
	}
}

func FuzzPlanner(f *testing.F) {
	f.Add(uint8(5), uint64(0x1234), uint8(0), uint8(0), "GET", "http://a/")
	f.Add(uint8(40), uint64(0xdeadbeef), uint8(3), uint8(2), "POST", "")
	f.Fuzz(func(t *testing.T, n uint8, states uint64, pol uint8, dir uint8, method, url string) {
		count := int(n%64) + 1
		var specs []string
		for i := 0; i < count; i++ {
			s := fmt.Sprintf("p%d:w%d", i, 1+int(states>>(i%60))&3)
			switch (states >> (i % 61)) & 3 {
			case 1:
				s += ":s"
			case 2:
				s += ":d"
			}
			specs = append(specs, s)
		}
		fx := newFixture(t, specs...)
		for i, p := range fx.reg.Peers() {
			switch (states >> (i % 62)) & 7 {
			case 0:
				fx.kill(p.Name())
			case 1:
				fx.reg.SetAdminState(p.Name(), peers.Drain)
			case 2:
				fx.reg.SetAdminState(p.Name(), peers.Maintenance)
			}
		}
		pl := New(fx.reg, Options{Policy: Policy(pol % 5), Direct: Direct(dir % 4), MaxTries: 100})
		plan := pl.Plan(Request{Method: method, URL: url, ClientIP: url})
		seen := map[*peers.Peer]bool{}
		for h, ok := plan.Next(); ok; h, ok = plan.Next() {
			if h.IsDirect() {
				continue
			}
			if !h.Peer.Health().Eligible() || seen[h.Peer] {
				t.Fatalf("ineligible or repeated hop %s", h.Peer.Name())
			}
			seen[h.Peer] = true
		}
	})
}

func BenchmarkPlanFirstHop(b *testing.B) {
	for _, pol := range []Policy{FirstUp, RoundRobin, WeightedRoundRobin, CARP, SourceHash} {
		for _, n := range []int{8, 64, 1024} {
			b.Run(fmt.Sprintf("%s/%d", pol, n), func(b *testing.B) {
				var specs []string
				for i := 0; i < n; i++ {
					specs = append(specs, fmt.Sprintf("p%d:w%d", i, 1+i%3))
				}
				f := newFixture(b, specs...)
				pl := New(f.reg, Options{Policy: pol, Direct: DirectAllow})
				r := Request{Method: "GET", URL: "http://example.com/some/path?q=1", ClientIP: "192.0.2.7"}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					plan := pl.Plan(r)
					if _, ok := plan.Next(); !ok {
						b.Fatal("no hop")
					}
				}
			})
		}
	}
}

// TestSlowStartShareFollowsTheRamp: a parent revived under slow start gets
// a share of weighted-round-robin picks that follows its ramp (10% of its
// weight at revival, 100% after slow_start) within 2%.
func TestSlowStartShareFollowsTheRamp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log, _ := test.NewNullLogger()
		h := peers.DefaultConfig()
		h.ConnectFailLimit, h.SlowStart, h.FlapLimit = 1, 100*time.Second, 0
		reg, err := peers.New(peers.Options{Health: h, Log: log}, []peers.Spec{
			{Name: "a", Host: "127.0.0.1", Port: 1}, {Name: "b", Host: "127.0.0.1", Port: 2}})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"a", "b"} {
			reg.Observe(reg.Get(n), peers.Outcome{At: time.Now(), Probe: true})
		}
		b := reg.Get("b")
		reg.Observe(b, peers.Outcome{At: time.Now(), Err: errRefused})
		reg.Observe(b, peers.Outcome{At: time.Now(), Probe: true}) // revived: ramping
		pl := New(reg, Options{Policy: WeightedRoundRobin})
		for step := 0; step <= 12; step++ {
			ramp := min(1, 0.1+0.9*float64(step*10)/100)
			want := ramp / (1 + ramp)
			picks := 0
			const n = 2000
			for range n {
				plan := pl.Plan(Request{Method: "GET", URL: "http://x/"})
				if h, _ := plan.Next(); h.Peer == b {
					picks++
				}
			}
			if got := float64(picks) / n; got < want-0.02 || got > want+0.02 {
				t.Errorf("at %ds: b has %.3f of the picks; want %.3f ± 0.02", step*10, got, want)
			}
			time.Sleep(10 * time.Second)
		}
	})
}

// TestExplain: the explained plan is the one the next request gets, with
// every left-out peer and the reason, and explaining changes nothing.
func TestExplain(t *testing.T) {
	f := newFixture(t, "a", "b", "c", "d", "s:s", "z:d")
	f.kill("a")
	f.reg.SetAdminState("b", peers.Drain)
	pl := New(f.reg, Options{Policy: RoundRobin, Direct: DirectAllow})
	r := Request{Method: "GET", URL: "http://x/"}
	e1, e2 := pl.Explain(r), pl.Explain(r)
	if e1.Hops[1].Peer != e2.Hops[1].Peer {
		t.Fatalf("explaining moved the round-robin turn: %v then %v", e1.Hops, e2.Hops)
	}
	plan := pl.Plan(r)
	plan.Next() // the sibling
	if h, _ := plan.Next(); h.Peer.Name() != e1.Hops[1].Peer {
		t.Fatalf("the next request's first parent is %s; explain said %s", h.Peer.Name(), e1.Hops[1].Peer)
	}
	var got []string
	for _, h := range e1.Hops {
		got = append(got, h.Peer+":"+h.Type)
	}
	want := []string{"s:sibling", e1.Hops[1].Peer + ":parent", e1.Hops[2].Peer + ":parent", "z:parent", "DIRECT:direct"}
	if strings.Join(got, " ") != strings.Join(want, " ") || !strings.Contains(e1.Hops[3].Why, "default") {
		t.Fatalf("hops %v; want %v", e1.Hops, want)
	}
	skipped := map[string]string{}
	for _, s := range e1.Skipped {
		skipped[s.Peer] = s.Why
	}
	if skipped["a"] != "dead" || skipped["b"] != "drain" || len(skipped) != 2 {
		t.Fatalf("skipped %v; want a dead and b drain", skipped)
	}
	post := pl.Explain(Request{Method: "POST", URL: "http://x/"})
	for _, s := range post.Skipped {
		if s.Peer == "s" && !strings.Contains(s.Why, "GET and HEAD") {
			t.Fatalf("sibling skipped for POST because %q", s.Why)
		}
	}
}

// An ICP answer puts its peer first, with its code; the siblings ICP
// asked are not asked again over HTTP, others still are.
func TestPlanICPFirst(t *testing.T) {
	f := newFixture(t, "s1:s:icp", "s2:s", "p1", "p2")
	pl := New(f.reg, Options{Policy: FirstUp, Direct: DirectNever, MaxTries: 10})
	plan := pl.Plan(Request{Method: "GET", URL: "http://o/x", First: f.reg.Get("p2"), FirstCode: "FIRST_PARENT_MISS", SkipICPSiblings: true})
	var got []string
	for {
		h, ok := plan.Next()
		if !ok {
			break
		}
		got = append(got, h.Peer.Name()+"/"+h.Code)
	}
	want := []string{"p2/FIRST_PARENT_MISS", "s2/SIBLING_HIT", "p1/FIRSTUP_PARENT"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("plan %v; want %v", got, want)
	}
	// A dead ICP choice is skipped.
	f.kill("p2")
	plan = pl.Plan(Request{Method: "GET", URL: "http://o/x", First: f.reg.Get("p2"), FirstCode: "FIRST_PARENT_MISS"})
	if h, _ := plan.Next(); h.Peer.Name() != "s1" {
		t.Fatalf("first hop %s; a dead ICP choice must not be tried", h.Peer.Name())
	}
}

// TestHierarchyCodesAsSquid: each hop's hierarchy code (the access log's
// and peerd_requests_total's) is the one Squid 5.7 logs for the same
// cache_peer option, read off a real Squid's access.log; DIRECT is
// HIER_DIRECT.
func TestHierarchyCodesAsSquid(t *testing.T) {
	for _, tc := range []struct {
		policy Policy
		want   string
	}{
		{FirstUp, "FIRSTUP_PARENT"},
		{RoundRobin, "ROUNDROBIN_PARENT"},
		{WeightedRoundRobin, "ROUNDROBIN_PARENT"},
		{CARP, "CARP"},
		{SourceHash, "SOURCEHASH_PARENT"},
	} {
		f := newFixture(t, "p1", "d:d")
		pl := New(f.reg, Options{Policy: tc.policy, Direct: DirectAllow, MaxTries: 10})
		var got []string
		for plan := pl.Plan(Request{Method: "GET", URL: "http://o/x", ClientIP: "10.0.0.1"}); ; {
			h, ok := plan.Next()
			if !ok {
				break
			}
			got = append(got, h.Code)
		}
		if want := tc.want + " DEFAULT_PARENT HIER_DIRECT"; strings.Join(got, " ") != want {
			t.Errorf("%s: codes %v; want %s", tc.policy, got, want)
		}
	}
}

// TestRoutingHeldAcrossSetOptions: a Routing taken before the options
// change plans with the old routes and direct mode; the planner plans
// with the new ones.
func TestRoutingHeldAcrossSetOptions(t *testing.T) {
	f := newFixture(t, "p1", "p2")
	pl := New(f.reg, Options{Policy: FirstUp, Direct: DirectNever})
	held := pl.Routing()
	routes, err := CompileRoutes([]RouteSpec{{Peers: []string{"p2"}}}, map[string]bool{"p1": true, "p2": true})
	if err != nil {
		t.Fatal(err)
	}
	pl.SetOptions(Options{Policy: FirstUp, Direct: DirectAllow, Routes: routes})
	r := Request{Method: "GET", URL: "http://x.test/", Host: "x.test", Port: 80}
	plan := held.Plan(r)
	var old []string
	for h, ok := plan.Next(); ok; h, ok = plan.Next() {
		if h.IsDirect() {
			old = append(old, "DIRECT")
		} else {
			old = append(old, h.Peer.Name())
		}
	}
	if fmt.Sprint(old) != "[p1 p2]" || held.DirectAllowed() {
		t.Fatalf("the held routing planned %v (direct %v); want [p1 p2] and never", old, held.DirectAllowed())
	}
	if got := walkAll(pl, r); fmt.Sprint(got) != "[p2 DIRECT]" {
		t.Fatalf("the new options planned %v; want [p2 DIRECT]", got)
	}
}

// slowDown gives parent a head times ratio x its peers', and the others
// 10 ms, then judges: a's latency share falls below 1.
func slowDown(f *fixture, slow string, ratio float64, others ...string) {
	now := time.Now()
	for i := 0; i < 10; i++ {
		for _, o := range others {
			f.reg.Observe(f.reg.Get(o), peers.Outcome{Event: peers.Answered, Class: peers.AnswerOK, FirstByte: 10 * time.Millisecond, At: now})
		}
		f.reg.Observe(f.reg.Get(slow), peers.Outcome{Event: peers.Answered, Class: peers.AnswerOK, FirstByte: time.Duration(ratio * float64(10*time.Millisecond)), At: now})
	}
	f.reg.Judge(now)
}

// TestLatencyShareThinsAParent: a parent slower than its peers (share
// 0.17 at 3 x, below outlier_factor) gets about that part of its turns
// under round-robin, and the others take the rest; under carp the keys of
// the parents at a normal share stay where they were, and only some of
// the slow parent's move.
func TestLatencyShareThinsAParent(t *testing.T) {
	f := newFixture(t, "a", "b", "c")
	keysOf := map[string]string{}
	carp := New(f.reg, Options{Policy: CARP})
	for i := 0; i < 3000; i++ {
		u := fmt.Sprintf("http://k%d.test/", i)
		keysOf[u] = first(carp, Request{Method: "GET", URL: u})
	}
	slowDown(f, "a", 2.9, "b", "c")
	if s := f.reg.Get("a").Health().LatencyShare(); s < 0.15 || s > 0.2 || f.reg.Get("a").Health().Outlier() {
		t.Fatalf("a's share %v (outlier %v); want about 0.19, no outlier", s, f.reg.Get("a").Health().Outlier())
	}
	rr := New(f.reg, Options{Policy: RoundRobin})
	n := map[string]int{}
	for i := 0; i < 6000; i++ {
		n[first(rr, Request{Method: "GET", URL: "http://x.test/"})]++
	}
	if n["a"] < 200 || n["a"] > 600 || n["b"] < 2500 || n["c"] < 2500 {
		t.Fatalf("round-robin firsts %v; want a about 6000/3 x 0.19", n)
	}
	wrr := New(f.reg, Options{Policy: WeightedRoundRobin})
	n = map[string]int{}
	for i := 0; i < 6000; i++ {
		n[first(wrr, Request{Method: "GET", URL: "http://x.test/"})]++
	}
	if n["a"] < 300 || n["a"] > 800 || n["b"] < 2500 || n["c"] < 2500 {
		t.Fatalf("weighted round-robin firsts %v; want a about 6000 x 0.19/2.19", n)
	}
	moved, aKeys, aKept := 0, 0, 0
	for u, was := range keysOf {
		now := first(carp, Request{Method: "GET", URL: u})
		switch {
		case was == "a":
			aKeys++
			if now == "a" {
				aKept++
			}
		case now != was:
			moved++
		}
	}
	if moved != 0 {
		t.Fatalf("%d keys of the parents at a normal share moved", moved)
	}
	if aKeys == 0 || aKept == 0 || aKept > aKeys/3 {
		t.Fatalf("a kept %d of its %d keys; want about a fifth", aKept, aKeys)
	}
	// /plan says so.
	e := rr.Explain(Request{Method: "GET", URL: "http://x.test/"})
	for _, h := range e.Hops {
		if h.Type == "direct" {
			continue
		}
		if h.LatencyShare == nil {
			t.Fatalf("hop %s without latency_share", h.Peer)
		}
		if h.Peer == "a" && *h.LatencyShare > 0.2 {
			t.Fatalf("a's latency_share %v", *h.LatencyShare)
		}
	}
}
