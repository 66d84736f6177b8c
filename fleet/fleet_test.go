package fleet

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/peerd/peerd/peers"
	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
)

var errRefused = errors.New("connect: connection refused")

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func newRegistry(t *testing.T, specs ...peers.Spec) *peers.Registry {
	t.Helper()
	log, _ := test.NewNullLogger()
	r, err := peers.New(peers.Options{Health: peers.DefaultConfig(), ConnectTimeout: time.Second, Log: log}, specs)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func alive(r *peers.Registry, p *peers.Peer) {
	r.Observe(p, peers.Observation{At: t0, RTT: time.Millisecond, Probe: true})
}

// testMember is a member without a memberlist: what receive and publish
// need (a name and a queue).
func testMember(f *Fleet, node string) *member {
	return &member{f: f, node: node, queue: &memberlist.TransmitLimitedQueue{NumNodes: func() int { return 3 }, RetransmitMult: 4}}
}

func TestGossipedDeathMakesSuspectNeverDeadOrAlive(t *testing.T) {
	r := newRegistry(t, peers.Spec{Name: "p1", Host: "127.0.0.1", Port: 3128}, peers.Spec{Name: "p2", Host: "127.0.0.2", Port: 3128},
		peers.Spec{Name: "other-name", Host: "127.0.0.3", Port: 3128})
	log, _ := test.NewNullLogger()
	f := New(r, log)
	m := testMember(f, "b")
	p1, p2, p3 := r.Get("p1"), r.Get("p2"), r.Get("other-name")
	alive(r, p1)
	alive(r, p3)

	f.receive(m, []Verdict{{Node: "a", Peer: "p1", Addr: "127.0.0.9:3128", State: StateDead, At: 10}}, true)
	if p1.State() != peers.Alive || !p1.Suspect() {
		t.Fatalf("p1 after a gossiped death: %v suspect=%v; want alive and suspect", p1.State(), p1.Suspect())
	}
	h := p1.History()
	if last := h[len(h)-1]; last.Cause != peers.CauseFleet || !strings.Contains(last.Error, "a reported p1") {
		t.Fatalf("history %+v; want an entry with cause fleet naming the member", h)
	}
	if m.queue.NumQueued() != 1 {
		t.Fatalf("%d broadcasts queued; a new verdict is relayed once", m.queue.NumQueued())
	}

	// The member's own probe settles it; the same verdict again (relayed
	// by a third member, or in a state exchange) is old news.
	alive(r, p1)
	f.receive(m, []Verdict{{Node: "a", Peer: "p1", Addr: "127.0.0.9:3128", State: StateDead, At: 10}}, true)
	if p1.Suspect() {
		t.Fatal("a repeated verdict made p1 suspect again")
	}
	if m.queue.NumQueued() != 1 {
		t.Fatalf("%d broadcasts queued; old news is not relayed", m.queue.NumQueued())
	}
	// An older one neither.
	f.receive(m, []Verdict{{Node: "a", Peer: "p1", State: StateDead, At: 5}}, false)
	if p1.Suspect() {
		t.Fatal("an older verdict made p1 suspect")
	}

	// p2 is unknown (no probe verdict yet): an "alive" verdict does not
	// revive it, a "dead" one changes nothing.
	f.receive(m, []Verdict{{Node: "a", Peer: "p2", State: StateAlive, At: 11}, {Node: "c", Peer: "p2", State: StateDead, At: 11}}, false)
	if p2.State() != peers.Unknown || p2.Suspect() {
		t.Fatalf("p2 %v suspect=%v; gossip must not change an unknown peer", p2.State(), p2.Suspect())
	}

	// A peer named otherwise here is found by its address.
	f.receive(m, []Verdict{{Node: "a", Peer: "p3-there", Addr: "127.0.0.3:3128", State: StateDead, At: 12}}, false)
	if !p3.Suspect() {
		t.Fatal("a verdict about the same address under another name was ignored")
	}

	// Our own verdicts relayed back are ignored.
	alive(r, p3)
	f.receive(m, []Verdict{{Node: "b", Peer: "other-name", State: StateDead, At: 99}}, false)
	if p3.Suspect() {
		t.Fatal("this member's own verdict, relayed back, was applied")
	}

	// A dead peer stays dead whatever is gossiped.
	for range p1.ConnectFailLimit() {
		r.Observe(p1, peers.Observation{At: t0, Err: errRefused})
	}
	f.receive(m, []Verdict{{Node: "a", Peer: "p1", State: StateAlive, At: 20}, {Node: "c", Peer: "p1", State: StateAlive, At: 20}}, false)
	if p1.State() != peers.Dead {
		t.Fatalf("p1 %v after alive verdicts from two members; revival is by own probe only", p1.State())
	}
}

func TestPublishOnChangeOnly(t *testing.T) {
	r := newRegistry(t, peers.Spec{Name: "p1", Host: "127.0.0.1", Port: 3128})
	log, _ := test.NewNullLogger()
	f := New(r, log)
	m := testMember(f, "a")
	f.cur.Store(m)
	f.publish(t0)
	f.publish(t0)
	if n := m.queue.NumQueued(); n != 1 {
		t.Fatalf("%d broadcasts after two publishes of an unchanged registry; want 1", n)
	}
	alive(r, r.Get("p1"))
	f.publish(t0) // the same wall clock: the time still moves on
	if f.own["p1"].State != StateAlive || f.own["p1"].At <= t0.UnixNano() {
		t.Fatalf("own verdict %+v; want alive with a later time than the first", f.own["p1"])
	}
	// The queue keeps one message per node and peer: the newer verdict
	// replaced the older.
	if n := m.queue.NumQueued(); n != 1 {
		t.Fatalf("%d broadcasts queued; a newer verdict about the same peer replaces the older", n)
	}
	vs, err := decode((*delegate)(m).LocalState(false))
	if err != nil || len(vs) != 1 || vs[0].Node != "a" || vs[0].State != StateAlive {
		t.Fatalf("state exchange %+v %v; want a's own alive verdict", vs, err)
	}
}

func TestDecodeRejects(t *testing.T) {
	for _, in := range []string{
		``, `{}`, `{"v":2,"verdicts":[]}`, `not json`,
		`{"v":1,"verdicts":[{"node":"","peer":"p1","state":"dead","at":1}]}`,
		`{"v":1,"verdicts":[{"node":"a","peer":"p1","state":"zombie","at":1}]}`,
		`{"v":1,"verdicts":[{"node":"a","peer":"p1","state":"dead","at":0}]}`,
		`{"v":1,"verdicts":[{"node":"a","peer":"` + strings.Repeat("x", 300) + `","state":"dead","at":1}]}`,
		`{"v":1,"verdicts":[{"node":"a","peer":"p1","state":"dead","at":1},{"node":"a","peer":"p1","state":"dead"}]}`,
	} {
		if vs, err := decode([]byte(in)); err == nil {
			t.Errorf("decode(%q) = %+v; want an error", in, vs)
		}
	}
	vs, err := decode([]byte(`{"v":1,"verdicts":[{"node":"a","peer":"p1","addr":"127.0.0.1:3128","state":"dead","at":7}]}`))
	if err != nil || len(vs) != 1 || vs[0] != (Verdict{Node: "a", Peer: "p1", Addr: "127.0.0.1:3128", State: StateDead, At: 7}) {
		t.Fatalf("decode = %+v %v", vs, err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"v":1,"verdicts":[{"node":"a","peer":"p1","addr":"127.0.0.1:3128","state":"dead","at":7}]}`))
	f.Add([]byte(`{"v":1,"verdicts":[]}`))
	f.Add([]byte(`{"v":1,"verdicts":[{"node":"a","peer":"p1","state":"alive","at":1e3}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		vs, err := decode(b)
		if err != nil {
			return
		}
		// What is accepted is well formed and survives a round trip.
		for _, v := range vs {
			if v.check() != nil {
				t.Fatalf("accepted a bad verdict %+v", v)
			}
		}
		b2, err := encode(vs)
		if err != nil {
			t.Fatal(err)
		}
		vs2, err := decode(b2)
		if err != nil || len(vs2) != len(vs) {
			t.Fatalf("round trip: %v", err)
		}
		for i := range vs {
			if vs[i] != vs2[i] {
				t.Fatalf("round trip changed %+v to %+v", vs[i], vs2[i])
			}
		}
	})
}

func TestConfigValidate(t *testing.T) {
	key := base64.StdEncoding.EncodeToString(make([]byte, 32))
	for _, c := range []struct {
		cfg  Config
		want string // "" = valid
	}{
		{Config{}, ""},
		{Config{Bind: "127.0.0.1:7946"}, ""},
		{Config{Bind: "[::1]:7946"}, ""},
		{Config{Bind: "localhost:7946"}, ""},
		{Config{Bind: "10.0.0.5:7946", Key: key, Join: []string{"10.0.0.6:7946"}}, ""},
		{Config{Bind: "10.0.0.5:7946"}, "fleet.key: is required"},
		{Config{Bind: "0.0.0.0:7946"}, "fleet.key: is required"},
		{Config{Bind: "7946"}, "fleet.bind"},
		{Config{Bind: "127.0.0.1:x"}, "fleet.bind"},
		{Config{Bind: "127.0.0.1:7946", Key: "c2hvcnQ="}, "decodes to 5 bytes"},
		{Config{Bind: "127.0.0.1:7946", Key: "%%%"}, "not base64"},
		{Config{Bind: "127.0.0.1:7946", Join: []string{"nohost"}}, "fleet.join"},
	} {
		err := c.cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v; want valid", c.cfg, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: %v; want an error with %q", c.cfg, err, c.want)
		}
	}
}

func TestLogWriterLevels(t *testing.T) {
	log, hook := test.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	w := logWriter{log}
	for _, line := range []string{"[ERR] memberlist: a", "[WARN] memberlist: b", "[INFO] memberlist: c", "[DEBUG] memberlist: d", "plain"} {
		w.Write([]byte(line + "\n"))
	}
	want := []logrus.Level{logrus.ErrorLevel, logrus.WarnLevel, logrus.InfoLevel, logrus.DebugLevel, logrus.DebugLevel}
	for i, e := range hook.AllEntries() {
		if e.Level != want[i] || strings.Contains(e.Message, "[") {
			t.Errorf("line %d: %v %q; want level %v without the bracket", i, e.Level, e.Message, want[i])
		}
	}
}
