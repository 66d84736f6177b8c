package e2e

import (
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// A fleet of peerds on loopback (contract section 14): several peerd
// processes gossiping over memberlist, sharing fake parents.

var fleetKey = base64.StdEncoding.EncodeToString([]byte("peerd-fleet-test-key-32-bytes!!!"))

type fleetStatus struct {
	Enabled bool   `json:"enabled"`
	Node    string `json:"node"`
	Members []struct {
		Node, Addr, State string
	} `json:"members"`
	Peers map[string]map[string]string `json:"peers"`
}

type transition struct {
	From, To, Cause, Error string
	At                     time.Time
}

func (p *peerd) fleet() fleetStatus {
	p.t.Helper()
	var st fleetStatus
	p.adminJSON("GET", "/fleet", "", &st)
	return st
}

// gossipAddr is this member's own gossip address, as /fleet shows it.
func (p *peerd) gossipAddr() string {
	p.t.Helper()
	st := p.fleet()
	for _, m := range st.Members {
		if m.Node == st.Node {
			return m.Addr
		}
	}
	p.t.Fatalf("/fleet does not list this member: %+v", st)
	return ""
}

func (p *peerd) history(peer string) []transition {
	p.t.Helper()
	var h struct{ Transitions []transition }
	p.adminJSON("GET", "/peers/"+peer+"/history", "", &h)
	return h.Transitions
}

// fleetConfig is a member named name gossiping on loopback; join may be
// empty. rest is appended (health, peers).
func fleetConfig(name, key string, join []string, rest string) string {
	cfg := strings.Replace(baseConfig, `name = "peerd"`, fmt.Sprintf("name = %q", name), 1)
	j := make([]string, len(join))
	for i, a := range join {
		j[i] = fmt.Sprintf("%q", a)
	}
	return cfg + fmt.Sprintf("\n[fleet]\nbind = \"127.0.0.1:0\"\nkey = %q\njoin = [%s]\n", key, strings.Join(j, ", ")) + rest
}

// startFleet starts members a, b, c (b and c join a) with rest as the
// remaining config and waits until each sees all three.
func startFleet(t *testing.T, rest func(member string) string) []*peerd {
	a := startPeerd(t, fleetConfig("a", fleetKey, nil, rest("a")))
	join := []string{a.gossipAddr()}
	b := startPeerd(t, fleetConfig("b", fleetKey, join, rest("b")))
	c := startPeerd(t, fleetConfig("c", fleetKey, join, rest("c")))
	ms := []*peerd{a, b, c}
	waitFor(t, "three members seeing each other", 10*time.Second, func() bool {
		for _, m := range ms {
			if len(m.fleet().Members) != 3 {
				return false
			}
		}
		return true
	})
	return ms
}

// liveConnects is a member's client-request connects to peer (probes
// excluded).
func liveConnects(m *peerd, peer string) int {
	st := m.peer(peer)
	return st.ConnectsTotal - st.ProbesTotal
}

// revivedByOwnProbe checks that every dead->alive transition of peer in
// m's history was its own probe's.
func revivedByOwnProbe(t *testing.T, name string, m *peerd, peer string) {
	t.Helper()
	revived := false
	for _, tr := range m.history(peer) {
		if tr.From == "dead" && tr.To == "alive" {
			revived = true
			if tr.Cause != "probe" {
				t.Errorf("member %s revived %s by %q; revival is by own probe only", name, peer, tr.Cause)
			}
		}
	}
	if !revived {
		t.Errorf("member %s: no revival of %s in its history: %+v", name, peer, m.history(peer))
	}
}

const fleetHealth = `
[health]
connect_fail_limit = 3
probe_interval = "200ms"
probe_max_interval = "500ms"
probe_timeout = "300ms"
idle_probe = "0s"
`

// TestFleetLearnsADeathOnce: only member a has client traffic. When a
// finds p1 dead, b and c learn it from gossip: each marks p1 suspect
// (history cause "fleet"), probes it itself and finds it dead, without a
// single client connect to it. When p1 returns, each member revives it by
// its own probe.
func TestFleetLearnsADeathOnce(t *testing.T) {
	t.Parallel()
	p1, p2 := newFakeParent(t, "p1"), newFakeParent(t, "p2")
	ms := startFleet(t, func(string) string { return fleetHealth + policy("round-robin") + peerBlock("", p1, p2) })
	a, b, c := ms[0], ms[1], ms[2]
	for _, m := range ms {
		waitFor(t, "p1 alive everywhere", 5*time.Second, func() bool { return m.peer("p1").State == "alive" })
	}
	p1.stop()
	cl := a.client()
	for i := 0; a.peer("p1").State != "dead"; i++ {
		if i > 100 {
			t.Fatal("a never found p1 dead")
		}
		if r := do(cl, "GET", fmt.Sprintf("http://origin.test/x%d", i), ""); r.status != 200 {
			t.Fatalf("GET through a: %s", r)
		}
	}
	for _, m := range []*peerd{b, c} {
		waitFor(t, "p1 dead on every member", 5*time.Second, func() bool { return m.peer("p1").State == "dead" })
	}
	for name, m := range map[string]*peerd{"b": b, "c": c} {
		fleetCause := false
		for _, tr := range m.history("p1") {
			if tr.Cause == "fleet" && tr.To == "suspect" && strings.Contains(tr.Error, "a") {
				fleetCause = true
			}
			if tr.Cause == "fleet" && (tr.To == "dead" || tr.To == "alive") {
				t.Errorf("member %s: gossip changed p1 to %s: %+v", name, tr.To, tr)
			}
		}
		if !fleetCause {
			t.Errorf("member %s: no history entry with cause fleet: %+v", name, m.history("p1"))
		}
		if n := liveConnects(m, "p1"); n != 0 {
			t.Errorf("member %s: %d client connects to p1 (it had no client traffic)", name, n)
		}
	}
	st := b.fleet()
	if st.Peers["p1"]["a"] != "dead" || st.Peers["p1"]["b"] != "dead" {
		t.Errorf("GET /fleet on b: p1 = %v; want a and b both dead", st.Peers["p1"])
	}

	p1.restart()
	for name, m := range map[string]*peerd{"a": a, "b": b, "c": c} {
		waitFor(t, "p1 revived on "+name, 5*time.Second, func() bool { return m.peer("p1").State == "alive" })
		revivedByOwnProbe(t, name, m, "p1")
	}
	if !strings.Contains(b.adminMetrics(), "peerd_fleet_members 3") {
		t.Error("peerd_fleet_members is not 3 on b")
	}
}

// TestFleetUnderLoad: 200 req/s across three members and three parents;
// p1 is killed. From 1 s after the first member saw p1 dead, no member
// makes a single client connect to it, and no client sees an error.
func TestFleetUnderLoad(t *testing.T) {
	t.Parallel()
	ps := []*fakeParent{newFakeParent(t, "p1"), newFakeParent(t, "p2"), newFakeParent(t, "p3")}
	ms := startFleet(t, func(string) string {
		return fleetHealth + policy("round-robin") + peerBlock("", ps[0], ps[1], ps[2])
	})
	for _, m := range ms {
		waitFor(t, "p1 alive everywhere", 5*time.Second, func() bool { return m.peer("p1").State == "alive" })
	}
	var errs, sent atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := m.client()
			tick := time.NewTicker(15 * time.Millisecond) // ~67 req/s per member
			defer tick.Stop()
			for n := 0; n < 1000; n++ { // bounded: at most 15 s
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				sent.Add(1)
				if r := do(cl, "GET", fmt.Sprintf("http://origin.test/m%d-%d", i, n), ""); r.status != 200 {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, r.String())
				}
			}
		}()
	}
	waitFor(t, "load flowing", 10*time.Second, func() bool { return sent.Load() >= 100 })
	ps[0].stop()
	var firstDead time.Time
	waitFor(t, "a member finding p1 dead", 5*time.Second, func() bool {
		for _, m := range ms {
			if m.peer("p1").State == "dead" {
				firstDead = time.Now()
				return true
			}
		}
		return false
	})
	// Every member has p1 dead, by its own finding or the fleet's.
	for _, m := range ms {
		waitFor(t, "p1 dead on every member", 3*time.Second, func() bool { return m.peer("p1").State == "dead" })
	}
	before := 0
	for _, m := range ms {
		before += liveConnects(m, "p1")
	}
	// 300 more client requests go by: not one may connect to p1.
	n := sent.Load()
	waitFor(t, "300 more requests", 15*time.Second, func() bool { return sent.Load() >= n+300 })
	after := 0
	for _, m := range ms {
		after += liveConnects(m, "p1")
		if st := m.peer("p1"); st.State != "dead" {
			t.Errorf("p1 is %s on a member 300 requests after the first death", st.State)
		}
	}
	if after != before {
		t.Errorf("%d client connects to p1 in the 300 requests after every member had it dead (first death at %v); want 0", after-before, firstDead.Format(time.StampMilli))
	}
	ps[0].restart()
	for i, m := range ms {
		waitFor(t, "p1 revived", 5*time.Second, func() bool { return m.peer("p1").State == "alive" })
		revivedByOwnProbe(t, string(rune('a'+i)), m, "p1")
	}
	close(stop)
	wg.Wait()
	if n := errs.Load(); n > 0 {
		t.Errorf("%d of %d client requests failed (first: %v)", n, sent.Load(), firstErr.Load())
	}
	t.Logf("%d requests; live connects to p1 after the first death: %d", sent.Load(), before)
}

// TestFleetPartialPartition: member a reaches p1 at an address that
// black-holes; member b reaches the same parent at its real address. a
// finds p1 dead and says so; b marks it suspect, probes it, finds it alive
// and keeps using it, with no error and no hedge delay for b's clients.
func TestFleetPartialPartition(t *testing.T) {
	p1, p2 := newFakeParent(t, "p1"), newFakeParent(t, "p2")
	hole := freeAddr(t, "127.0.0.2")
	blackholeAt(t, hole)
	_, holePort, _ := net.SplitHostPort(hole)
	rest := fleetHealth + policy("round-robin") + peerBlock("", p2)
	a := startPeerd(t, fleetConfig("a", fleetKey, nil,
		rest+fmt.Sprintf("[[peer]]\nname = \"p1\"\nhost = \"127.0.0.2\"\nport = %s\nconnect_timeout = \"300ms\"\n", holePort)))
	b := startPeerd(t, fleetConfig("b", fleetKey, []string{a.gossipAddr()}, rest+peerBlock("", p1)))
	waitFor(t, "a and b joined", 10*time.Second, func() bool { return len(b.fleet().Members) == 2 })
	waitFor(t, "p1 dead on a (its address black-holes)", 10*time.Second, func() bool { return a.peer("p1").State == "dead" })
	waitFor(t, "b has a's verdict", 5*time.Second, func() bool { return b.fleet().Peers["p1"]["a"] == "dead" })
	waitFor(t, "b settled its suspicion with its own probe", 5*time.Second, func() bool {
		h := b.history("p1")
		return len(h) > 0 && h[len(h)-1].From == "suspect" && h[len(h)-1].To == "alive" && h[len(h)-1].Cause == "probe"
	})
	if st := b.peer("p1"); st.State != "alive" || st.Suspect {
		t.Fatalf("b's p1 = %+v; want alive and not suspect", st)
	}
	cl := b.client()
	before := p1.requests("")
	hedgesBefore := metricValue(b.adminMetrics(), "peerd_connect_hedges_total")
	if hedgesBefore < 0 {
		t.Fatal("/metrics has no peerd_connect_hedges_total")
	}
	var worst time.Duration
	for i := 0; i < 40; i++ {
		start := time.Now()
		if r := do(cl, "GET", fmt.Sprintf("http://origin.test/pp%d", i), ""); r.status != 200 {
			t.Fatalf("GET %d through b: %s", i, r)
		}
		worst = max(worst, time.Since(start))
	}
	if n := p1.requests("") - before; n < 15 {
		t.Errorf("p1 served %d of b's 40 round-robin requests; b must keep using a parent it can reach", n)
	}
	// No connect of b's waited for a hedge delay (the precise check; the
	// latency bound is only a sanity check, loose for loaded machines).
	if h := metricValue(b.adminMetrics(), "peerd_connect_hedges_total") - hedgesBefore; h != 0 {
		t.Errorf("%v hedged connects through b; b's clients must see no hedge delay", h)
	}
	if worst >= time.Second {
		t.Errorf("slowest request through b took %v", worst)
	}
	t.Logf("slowest of 40 requests through b: %v", worst)
	if st := a.peer("p1"); st.State != "dead" {
		t.Errorf("a's p1 = %s; b's reach must not revive it on a", st.State)
	}
}

// TestFleetWrongKey: a member with another key cannot join, and says so
// in one log line.
func TestFleetWrongKey(t *testing.T) {
	t.Parallel()
	p1 := newFakeParent(t, "p1")
	a := startPeerd(t, fleetConfig("a", fleetKey, nil, fleetHealth+peerBlock("", p1)))
	other := base64.StdEncoding.EncodeToString([]byte("another-key-of-sixteen-bytes-ok!"))
	b := startPeerd(t, fleetConfig("b", other, []string{a.gossipAddr()}, fleetHealth+peerBlock("", p1)))
	waitFor(t, "b saying it cannot join", 10*time.Second, func() bool { return strings.Contains(b.logs(), "fleet: cannot join") })
	// Wait for a retry (the fact), then count the lines.
	waitFor(t, "b retrying the join", 10*time.Second, func() bool { return strings.Contains(b.logs(), "fleet: join retry failed") })
	lines := 0
	for _, l := range strings.Split(b.logs(), "\n") {
		if strings.Contains(l, "fleet: cannot join") {
			lines++
			if !strings.Contains(l, "key") {
				t.Errorf("the join error does not name the key: %s", l)
			}
		}
	}
	if lines != 1 {
		t.Errorf("%d log lines about the failed join; want one", lines)
	}
	for _, l := range strings.Split(b.logs(), "\n") {
		// (The suite's weak admin token gets its own start-up warning.)
		if (strings.Contains(l, "level=error") || strings.Contains(l, "level=warning")) && !strings.Contains(l, "fleet: cannot join") &&
			!strings.Contains(l, "admin.token") {
			t.Errorf("the member that cannot join also logged (one line is the promise): %s", l)
		}
	}
	if n, m := len(a.fleet().Members), len(b.fleet().Members); n != 1 || m != 1 {
		t.Errorf("members: a sees %d, b sees %d; with different keys neither may join", n, m)
	}
}

// TestFleetReload: [fleet] applies on SIGHUP (joining, leaving), and peer
// state survives it.
func TestFleetReload(t *testing.T) {
	t.Parallel()
	p1 := newFakeParent(t, "p1")
	rest := fleetHealth + peerBlock("", p1)
	a := startPeerd(t, fleetConfig("a", fleetKey, nil, rest))
	cfgB := strings.Replace(baseConfig, `name = "peerd"`, `name = "b"`, 1) + rest
	b := startPeerd(t, cfgB)
	waitFor(t, "p1 alive on b", 5*time.Second, func() bool { return b.peer("p1").State == "alive" })
	cl := b.client()
	for i := 0; i < 5; i++ {
		do(cl, "GET", fmt.Sprintf("http://origin.test/r%d", i), "")
	}
	reqs := b.peer("p1").RequestsTotal
	if st := b.fleet(); st.Enabled || len(st.Members) != 0 {
		t.Fatalf("b's /fleet before the reload: %+v; want off", st)
	}
	reloadConfig(t, b, fleetConfig("b", fleetKey, []string{a.gossipAddr()}, rest))
	b.signal(syscall.SIGHUP)
	waitFor(t, "b joined after SIGHUP", 10*time.Second, func() bool { return len(b.fleet().Members) == 2 && len(a.fleet().Members) == 2 })
	if st := b.peer("p1"); st.RequestsTotal != reqs || st.State != "alive" {
		t.Errorf("b's p1 after the reload: %+v; want its state and %d requests kept", st, reqs)
	}
	reloadConfig(t, b, cfgB)
	b.signal(syscall.SIGHUP)
	waitFor(t, "a seeing b leave", 10*time.Second, func() bool { return len(a.fleet().Members) == 1 })
	if st := b.fleet(); st.Enabled {
		t.Errorf("b still in a fleet after [fleet] was removed: %+v", st)
	}
}

// freeAddr is an unused TCP port on ip (a loopback address).
func freeAddr(t *testing.T, ip string) string {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Skipf("no loopback address %s here: %v", ip, err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// adminMetrics is GET /metrics.
func (p *peerd) adminMetrics() string {
	p.t.Helper()
	resp, err := http.Get("http://" + p.admin + "/metrics")
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// metricValue is the value of an unlabelled metric in a /metrics text.
func metricValue(text, name string) float64 {
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return -1
}
