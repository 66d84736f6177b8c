package peers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var errRefused = errors.New("connect: connection refused")

func newTestRegistry(t testing.TB, limit int, specs ...Spec) (*Registry, *test.Hook) {
	t.Helper()
	log, hook := test.NewNullLogger()
	h := DefaultConfig()
	h.ConnectFailLimit = limit
	r, err := New(Options{Health: h, ConnectTimeout: time.Second, Log: log, Now: func() time.Time { return t0 }}, specs)
	if err != nil {
		t.Fatal(err)
	}
	return r, hook
}

func parent(name string, port int) Spec {
	return Spec{Name: name, Host: "127.0.0.1", Port: port}
}

func fail(r *Registry, p *Peer, probe bool) {
	r.Observe(p, Outcome{At: t0, Err: errRefused, Probe: probe})
}

func succeed(r *Registry, p *Peer, probe bool) {
	r.Observe(p, Outcome{At: t0, RTT: time.Millisecond, Probe: probe})
}

func warnings(hook *test.Hook) []string {
	var out []string
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel {
			out = append(out, e.Message)
		}
	}
	return out
}

func TestPeerStartsUnknownAndIneligible(t *testing.T) {
	r, _ := newTestRegistry(t, 3, parent("p1", 1))
	p := r.Get("p1")
	if got := p.Health().State(); got != Unknown {
		t.Fatalf("state = %v; want unknown", got)
	}
	if p.Health().Eligible() {
		t.Fatal("an unknown peer must get no traffic")
	}
	// A traffic connect that succeeds does not make an unknown peer alive:
	// only a probe gives the first verdict.
	succeed(r, p, false)
	if p.Health().State() != Unknown {
		t.Fatalf("state = %v after traffic success; want unknown", p.Health().State())
	}
	succeed(r, p, true)
	if p.Health().State() != Alive || !p.Health().Eligible() {
		t.Fatalf("state = %v after probe success; want alive and eligible", p.Health().State())
	}
}

func TestFailLimitCountsConsecutiveFailures(t *testing.T) {
	r, hook := newTestRegistry(t, 3, parent("p1", 1))
	p := r.Get("p1")
	succeed(r, p, true)

	fail(r, p, false)
	fail(r, p, false)
	if p.Health().State() != Alive {
		t.Fatalf("dead after 2 of 3 failures")
	}
	if !p.Health().Suspect() {
		t.Fatalf("a peer with failures below the limit is suspect")
	}
	succeed(r, p, false) // resets the run
	if got := p.Health().Snapshot().ConsecutiveFailures; got != 0 {
		t.Fatalf("consecutive = %d after success; want 0", got)
	}
	fail(r, p, false)
	fail(r, p, false)
	if p.Health().State() != Alive {
		t.Fatalf("dead after a reset run of 2")
	}
	fail(r, p, false)
	if p.Health().State() != Dead || p.Health().Eligible() {
		t.Fatalf("state = %v after 3 consecutive failures; want dead", p.Health().State())
	}
	st := p.Health().Snapshot()
	if st.DeathsTotal != 1 || st.ConnectFailuresTotal != 5 || st.ConnectsTotal != 7 {
		t.Fatalf("counters = deaths %d failures %d connects %d; want 1 5 7", st.DeathsTotal, st.ConnectFailuresTotal, st.ConnectsTotal)
	}
	if st.LastError != errRefused.Error() {
		t.Fatalf("last_error = %q; want %q", st.LastError, errRefused)
	}
	if !st.DeadSince.Equal(t0) {
		t.Fatalf("dead_since = %v; want %v", st.DeadSince, t0)
	}
	if got := warnings(hook); len(got) != 1 || got[0] != "Detected DEAD Parent: p1" {
		t.Fatalf("warnings = %q; want one Detected DEAD Parent: p1", got)
	}
	e := hook.LastEntry()
	if e.Data["peer"] != "p1" || e.Data["err"] != errRefused.Error() || e.Data["consecutive_failures"] != int64(3) {
		t.Fatalf("death log fields = %v", e.Data)
	}
}

func TestDeadPeerRevivedOnlyByProbe(t *testing.T) {
	r, hook := newTestRegistry(t, 1, Spec{Name: "s1", Host: "127.0.0.1", Port: 1, Type: Sibling})
	p := r.Get("s1")
	succeed(r, p, true)
	fail(r, p, false)
	if p.Health().State() != Dead {
		t.Fatal("want dead")
	}
	// A late success of a request that connected before the death.
	succeed(r, p, false)
	if p.Health().State() != Dead {
		t.Fatal("a traffic connect revived a dead peer; only probes may")
	}
	fail(r, p, true)
	if p.Health().State() != Dead || p.Health().Snapshot().ProbeFailuresTotal != 1 {
		t.Fatalf("failed probe: state %v probe failures %d", p.Health().State(), p.Health().Snapshot().ProbeFailuresTotal)
	}
	succeed(r, p, true)
	if p.Health().State() != Alive || p.Health().Snapshot().ConsecutiveFailures != 0 {
		t.Fatalf("state %v consecutive %d after a successful probe; want alive, 0", p.Health().State(), p.Health().Snapshot().ConsecutiveFailures)
	}
	st := p.Health().Snapshot()
	if st.RevivalsTotal != 1 || !st.DeadSince.IsZero() || st.ProbesTotal != 3 {
		t.Fatalf("revivals %d dead_since %v probes %d; want 1 nil 3", st.RevivalsTotal, st.DeadSince, st.ProbesTotal)
	}
	want := []string{"Detected DEAD Sibling: s1", "Detected REVIVED Sibling: s1"}
	if got := warnings(hook); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("warnings = %q; want %q", got, want)
	}
}

func TestFirstFailedProbeIsAVerdict(t *testing.T) {
	r, _ := newTestRegistry(t, 10, parent("p1", 1))
	p := r.Get("p1")
	fail(r, p, false) // traffic cannot reach an unknown peer, but be safe
	if p.Health().State() != Unknown {
		t.Fatal("a non-probe failure gave an unknown peer a verdict")
	}
	fail(r, p, true)
	if p.Health().State() != Dead {
		t.Fatalf("state = %v after failed first probe; want dead", p.Health().State())
	}
}

func TestExactlyOneDeathAndRevivalUnderConcurrency(t *testing.T) {
	for round := 0; round < 20; round++ {
		r, hook := newTestRegistry(t, 10, parent("p1", 1))
		p := r.Get("p1")
		succeed(r, p, true)
		var wg sync.WaitGroup
		for i := 0; i < 300; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				fail(r, p, false)
			}()
		}
		wg.Wait()
		for i := 0; i < 50; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				succeed(r, p, true)
			}()
		}
		wg.Wait()
		st := p.Health().Snapshot()
		if st.DeathsTotal != 1 || st.RevivalsTotal != 1 {
			t.Fatalf("deaths %d revivals %d; want exactly 1 each", st.DeathsTotal, st.RevivalsTotal)
		}
		if got := warnings(hook); len(got) != 2 {
			t.Fatalf("warnings = %q; want one death and one revival", got)
		}
	}
}

func TestAdminStates(t *testing.T) {
	r, _ := newTestRegistry(t, 1, parent("p1", 1))
	p := r.Get("p1")
	succeed(r, p, true)
	for _, tc := range []struct {
		state    AdminState
		eligible bool
	}{{Drain, false}, {Maintenance, false}, {Enabled, true}} {
		if _, err := r.SetAdminState("p1", tc.state); err != nil {
			t.Fatal(err)
		}
		if got := p.Health().Eligible(); got != tc.eligible {
			t.Errorf("%v: eligible = %v; want %v", tc.state, got, tc.eligible)
		}
	}
	if _, err := r.SetAdminState("nope", Drain); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("err = %v; want ErrUnknownPeer", err)
	}
	// A dead peer in maintenance stays dead when enabled again.
	fail(r, p, false)
	r.SetAdminState("p1", Maintenance)
	r.SetAdminState("p1", Enabled)
	if p.Health().State() != Dead || p.Health().Eligible() {
		t.Fatalf("enabling revived a dead peer")
	}
}

func TestMaxConnSkipsWithoutFailing(t *testing.T) {
	s := parent("p1", 1)
	s.MaxConn = 2
	r, _ := newTestRegistry(t, 1, s)
	p := r.Get("p1")
	succeed(r, p, true)
	for i := 0; i < 2; i++ {
		if !r.BeginRequest(p, time.Now()) {
			t.Fatalf("request %d refused below max_conn", i+1)
		}
	}
	if r.BeginRequest(p, time.Now()) {
		t.Fatal("third request admitted past max_conn 2")
	}
	if p.Health().Eligible() || p.Health().State() != Alive {
		t.Fatalf("a full peer is ineligible but alive; got eligible=%v state=%v", p.Health().Eligible(), p.Health().State())
	}
	r.EndRequest(p)
	if !p.Health().Eligible() {
		t.Fatal("peer below max_conn is eligible again")
	}
	if got := p.Health().Snapshot().RequestsTotal; got != 2 {
		t.Fatalf("requests_total = %d; want 2", got)
	}
}

func TestWatchFiresOnTransitions(t *testing.T) {
	r, _ := newTestRegistry(t, 1, parent("p1", 1))
	p := r.Get("p1")
	ch := r.Watch()
	succeed(r, p, true)
	select {
	case <-ch:
	default:
		t.Fatal("watch did not fire on unknown -> alive")
	}
	ch = r.Watch()
	succeed(r, p, false) // no state change: no churn
	select {
	case <-ch:
		t.Fatal("watch fired without a change")
	default:
	}
	fail(r, p, false)
	select {
	case <-ch:
	default:
		t.Fatal("watch did not fire on death")
	}
}

func TestListFiltersInConfigOrder(t *testing.T) {
	r, _ := newTestRegistry(t, 1, parent("zz", 1), parent("aa", 2), Spec{Name: "mm", Host: "h", Port: 3, Type: Sibling})
	fail(r, r.Get("zz"), true)
	fail(r, r.Get("mm"), true)
	names := func(ss []Snapshot, want State, filtered bool) string {
		var s []string
		for _, sn := range ss {
			if filtered && sn.State != want {
				t.Errorf("List by %s returned %s in state %s", want, sn.Peer.Name(), sn.State)
			}
			s = append(s, sn.Peer.Name())
		}
		return fmt.Sprint(s)
	}
	dead, unknown, par, sib := Dead, Unknown, Parent, Sibling
	for _, tc := range []struct {
		f    Filter
		want string
	}{
		{Filter{}, "[zz aa mm]"},
		{Filter{State: &dead}, "[zz mm]"},
		{Filter{State: &dead, Type: &par}, "[zz]"},
		{Filter{State: &unknown}, "[aa]"},
		{Filter{Type: &sib}, "[mm]"},
	} {
		var st State
		if tc.f.State != nil {
			st = *tc.f.State
		}
		if got := names(r.List(tc.f), st, tc.f.State != nil); got != tc.want {
			t.Errorf("List(%+v) = %s; want %s", tc.f, got, tc.want)
		}
	}
}

func TestReconcileKeepsStateOfUnchangedPeers(t *testing.T) {
	r, _ := newTestRegistry(t, 1, parent("keep", 1), parent("move", 2), parent("gone", 3))
	for _, p := range r.Peers() {
		succeed(r, p, true)
		fail(r, p, false) // each dies once
	}
	keep := r.Get("keep")
	gone := r.Get("gone")
	s := parent("keep", 1)
	s.Weight = 7
	opts := *r.opts.Load()
	if err := r.Reconcile(opts, []Spec{parent("new", 4), s, parent("move", 20)}); err != nil {
		t.Fatal(err)
	}
	if got := r.Get("keep"); got != keep || got.Health().State() != Dead || got.Health().Snapshot().DeathsTotal != 1 || got.Weight() != 7 {
		t.Fatalf("kept peer lost its state or missed the new weight: %+v", got.Health().Snapshot())
	}
	if mv := r.Get("move"); mv.Health().State() != Unknown || mv.Health().Snapshot().DeathsTotal != 0 {
		t.Fatalf("peer with a new port must start fresh: %+v", mv.Health().Snapshot())
	}
	if r.Get("new").Health().State() != Unknown {
		t.Fatal("new peer must start unknown")
	}
	if r.Get("gone") != nil {
		t.Fatal("removed peer still registered")
	}
	// A late outcome for a removed peer must not resurrect its row.
	succeed(r, gone, true)
	if r.Get("gone") != nil {
		t.Fatal("removed peer came back")
	}
	var order []string
	for _, p := range r.Peers() {
		order = append(order, p.Name())
	}
	if fmt.Sprint(order) != "[new keep move]" {
		t.Fatalf("order = %v", order)
	}
}

func TestWaitVerdicts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := newTestRegistry(t, 1, parent("a", 1), parent("b", 2))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- r.WaitVerdicts(ctx) }()
		succeed(r, r.Get("a"), true)
		synctest.Wait() // the waiter has seen a's verdict and blocked again
		select {
		case err := <-done:
			t.Fatalf("returned %v with b still unknown", err)
		default:
		}
		fail(r, r.Get("b"), true)
		synctest.Wait()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatal("still waiting with every peer given a verdict")
		}
	})
}

func TestValidateSpecs(t *testing.T) {
	specs := []Spec{
		parent("a", 1).WithDefaults(),
		{Name: "a", Host: "", Port: 70000, Weight: 0, Login: "nopass"},
	}
	err := ValidateSpecs(specs)
	if err == nil {
		t.Fatal("want errors")
	}
	var typ Type
	if err := typ.UnmarshalText([]byte("cousin")); err == nil || !strings.Contains(err.Error(), `unknown peer type "cousin"`) {
		t.Errorf("type cousin: %v", err)
	}
	for _, want := range []string{
		`peer[1] "a": host: is required`,
		`peer[1] "a": port: must be 1-65535, got 70000`,
		`peer[1] "a": weight: must be at least 1, got 0`,
		`peer[1] "a": login: must be "user:pass"`,
		`peer[1] "a": name: duplicate peer name (also peer[0])`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors %q lack %q", err, want)
		}
	}
}

func BenchmarkObserveSuccessAlive(b *testing.B) {
	r, _ := newTestRegistry(b, 10, parent("p1", 1))
	p := r.Get("p1")
	succeed(r, p, true)
	o := Outcome{At: t0, RTT: time.Millisecond}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Observe(p, o)
		}
	})
}

func BenchmarkEligible(b *testing.B) {
	r, _ := newTestRegistry(b, 10, parent("p1", 1))
	p := r.Get("p1")
	succeed(r, p, true)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !p.Health().Eligible() {
				b.Fatal("not eligible")
			}
		}
	})
}

// TestSetICPFollowsReloads: the set's ICP list is the peers with an
// icp_port, in config order, and a reload that gives or takes one moves
// it in or out.
func TestSetICPFollowsReloads(t *testing.T) {
	a, b, c := parent("a", 1), parent("b", 2), parent("c", 3)
	b.ICPPort, c.ICPPort = 3130, 3131
	r, _ := newTestRegistry(t, 1, a, b, c)
	names := func() (n []string) {
		for _, p := range r.Set().ICP {
			n = append(n, p.Name())
		}
		return n
	}
	if got := names(); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("ICP peers = %v; want [b c]", got)
	}
	a.ICPPort, b.ICPPort = 3132, 0
	if err := r.Reconcile(*r.opts.Load(), []Spec{a, b, c}); err != nil {
		t.Fatal(err)
	}
	if got := names(); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("after the reload, ICP peers = %v; want [a c]", got)
	}
}
