package fleet

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
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
	r.Observe(p, peers.Outcome{At: t0, RTT: time.Millisecond, Probe: true})
}

// testMember is a member without a memberlist: what receive and publish
// need (a name and a queue).
func testMember(f *Fleet, node string) *member {
	return &member{f: f, node: node, queue: &memberlist.TransmitLimitedQueue{NumNodes: func() int { return 3 }, RetransmitMult: 4},
		priv: newKey(), keyOf: func(string) ed25519.PublicKey { return nil }, now: func() time.Time { return t0 }}
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

	f.receive(m, []Verdict{{Node: "a", Peer: "p1", Addr: "127.0.0.9:3128", State: StateDead, At: 10}}, []byte("relayed"))
	if p1.Health().State() != peers.Alive || !p1.Health().Suspect() {
		t.Fatalf("p1 after a gossiped death: %v suspect=%v; want alive and suspect", p1.Health().State(), p1.Health().Suspect())
	}
	h := p1.Health().History()
	if last := h[len(h)-1]; last.Cause != peers.CauseFleet || !strings.Contains(last.Error, "a reported p1") {
		t.Fatalf("history %+v; want an entry with cause fleet naming the member", h)
	}
	if m.queue.NumQueued() != 1 {
		t.Fatalf("%d broadcasts queued; a new verdict is relayed once", m.queue.NumQueued())
	}

	// The member's own probe settles it; the same verdict again (relayed
	// by a third member, or in a state exchange) is old news.
	alive(r, p1)
	f.receive(m, []Verdict{{Node: "a", Peer: "p1", Addr: "127.0.0.9:3128", State: StateDead, At: 10}}, []byte("relayed"))
	if p1.Health().Suspect() {
		t.Fatal("a repeated verdict made p1 suspect again")
	}
	if m.queue.NumQueued() != 1 {
		t.Fatalf("%d broadcasts queued; old news is not relayed", m.queue.NumQueued())
	}
	// An older one neither.
	f.receive(m, []Verdict{{Node: "a", Peer: "p1", State: StateDead, At: 5}}, nil)
	if p1.Health().Suspect() {
		t.Fatal("an older verdict made p1 suspect")
	}

	// p2 is unknown (no probe verdict yet): an "alive" verdict does not
	// revive it, a "dead" one changes nothing.
	f.receive(m, []Verdict{{Node: "a", Peer: "p2", State: StateAlive, At: 11}, {Node: "c", Peer: "p2", State: StateDead, At: 11}}, nil)
	if p2.Health().State() != peers.Unknown || p2.Health().Suspect() {
		t.Fatalf("p2 %v suspect=%v; gossip must not change an unknown peer", p2.Health().State(), p2.Health().Suspect())
	}

	// A peer named otherwise here is found by its address.
	f.receive(m, []Verdict{{Node: "a", Peer: "p3-there", Addr: "127.0.0.3:3128", State: StateDead, At: 12}}, nil)
	if !p3.Health().Suspect() {
		t.Fatal("a verdict about the same address under another name was ignored")
	}

	// Our own verdicts relayed back are ignored.
	alive(r, p3)
	f.receive(m, []Verdict{{Node: "b", Peer: "other-name", State: StateDead, At: 99}}, nil)
	if p3.Health().Suspect() {
		t.Fatal("this member's own verdict, relayed back, was applied")
	}

	// A dead peer stays dead whatever is gossiped.
	for range p1.ConnectFailLimit() {
		r.Observe(p1, peers.Outcome{At: t0, Err: errRefused})
	}
	f.receive(m, []Verdict{{Node: "a", Peer: "p1", State: StateAlive, At: 20}, {Node: "c", Peer: "p1", State: StateAlive, At: 20}}, nil)
	if p1.Health().State() != peers.Dead {
		t.Fatalf("p1 %v after alive verdicts from two members; revival is by own probe only", p1.Health().State())
	}
}

func TestPublishOnChangeOnly(t *testing.T) {
	r := newRegistry(t, peers.Spec{Name: "p1", Host: "127.0.0.1", Port: 3128})
	log, _ := test.NewNullLogger()
	f := New(r, log)
	m := testMember(f, "a")
	f.cur.Store(m)
	f.publish(t0, nil, true)
	f.publish(t0, nil, true)
	if n := m.queue.NumQueued(); n != 1 {
		t.Fatalf("%d broadcasts after two publishes of an unchanged registry; want 1", n)
	}
	alive(r, r.Get("p1"))
	f.publish(t0, nil, true) // the same wall clock: the time still moves on
	if f.own["p1"].State != StateAlive || f.own["p1"].At <= t0.UnixNano() {
		t.Fatalf("own verdict %+v; want alive with a later time than the first", f.own["p1"])
	}
	// The queue keeps one message per node and peer: the newer verdict
	// replaced the older.
	if n := m.queue.NumQueued(); n != 1 {
		t.Fatalf("%d broadcasts queued; a newer verdict about the same peer replaces the older", n)
	}
	b := testMember(f, "b")
	b.keyOf = keysOf(m)
	_, vs, err := b.open((*delegate)(m).LocalState(false))
	if err != nil || len(vs) != 1 || vs[0].Node != "a" || vs[0].State != StateAlive {
		t.Fatalf("state exchange %+v %v; want a's own alive verdict", vs, err)
	}
}

// keysOf is a key lookup that knows these members.
func keysOf(ms ...*member) func(string) ed25519.PublicKey {
	return func(node string) ed25519.PublicKey {
		for _, m := range ms {
			if m.node == node {
				return m.priv.Public().(ed25519.PublicKey)
			}
		}
		return nil
	}
}

// TestLyingMember: a member with the fleet key speaks only for itself.
// It cannot send verdicts in another member's name, nor sign as a member
// that does not exist; a verdict with a time in the future, or about a
// peer this member does not have, is not kept; its deaths about one peer
// make it suspect at most once per suspectEvery.
func TestLyingMember(t *testing.T) {
	r := newRegistry(t, peers.Spec{Name: "p1", Host: "127.0.0.1", Port: 3128})
	log, _ := test.NewNullLogger()
	f := New(r, log)
	me := testMember(f, "me")
	honest, liar := testMember(f, "honest"), testMember(f, "liar")
	me.keyOf = keysOf(honest, liar)
	p1 := r.Get("p1")
	alive(r, p1)

	// The liar signs a verdict in honest's name: refused.
	forged, _ := json.Marshal(envelope{V: envelopeVersion, Node: "liar",
		Body: mustEncode(t, Verdict{Node: "honest", Peer: "p1", State: StateDead, At: 1}), Sig: nil})
	var e envelope
	json.Unmarshal(forged, &e)
	e.Sig = ed25519.Sign(liar.priv, signed("liar", e.Body))
	forged, _ = json.Marshal(e)
	if _, _, err := me.open(forged); err == nil || !strings.Contains(err.Error(), "in the name of honest") {
		t.Fatalf("a verdict in another member's name: %v; want it refused", err)
	}
	// ... or claims to be honest with its own key: the signature fails.
	e.Node = "honest"
	claimed, _ := json.Marshal(e)
	if _, _, err := me.open(claimed); !errors.Is(err, errForged) {
		t.Fatalf("a message signed by another key: %v; want errForged", err)
	}
	// A node that is not a member.
	ghost := testMember(f, "ghost")
	b, _ := ghost.seal([]Verdict{{Node: "ghost", Peer: "p1", State: StateDead, At: 1}})
	if _, _, err := me.open(b); err == nil || !strings.Contains(err.Error(), "not a member") {
		t.Fatalf("a non-member's message: %v; want it refused", err)
	}
	me.accept(b, true)
	if p1.Health().Suspect() || len(f.views) != 0 {
		t.Fatal("a non-member's verdict was applied")
	}

	// A time in the future is not kept (it would freeze the liar's later
	// real reports), nor a verdict about a peer we do not have.
	b, _ = liar.seal([]Verdict{{Node: "liar", Peer: "p1", State: StateAlive, At: math.MaxInt64}})
	me.accept(b, true)
	for i := 0; i < 200; i++ {
		b, _ = liar.seal([]Verdict{{Node: "liar", Peer: fmt.Sprintf("fake%d", i), Addr: "192.0.2.1:1", State: StateDead, At: 5}})
		me.accept(b, true)
	}
	if v, ok := f.views["liar"]; len(v) != 0 || ok && v["p1"].At == math.MaxInt64 {
		t.Fatalf("views of the liar: %+v; want nothing kept", v)
	}
	if n := me.queue.NumQueued(); n != 0 {
		t.Fatalf("%d refused messages relayed", n)
	}

	// Its real deaths count, but at most once per suspectEvery per peer.
	b, _ = liar.seal([]Verdict{{Node: "liar", Peer: "p1", State: StateDead, At: 10}})
	me.accept(b, true)
	if !p1.Health().Suspect() {
		t.Fatal("a member's own death verdict was not applied")
	}
	alive(r, p1)
	b, _ = liar.seal([]Verdict{{Node: "liar", Peer: "p1", State: StateDead, At: 11}})
	me.accept(b, true)
	if p1.Health().Suspect() {
		t.Fatal("a second death from the same member within suspectEvery made p1 suspect again")
	}
	me.now = func() time.Time { return t0.Add(suspectEvery) }
	b, _ = liar.seal([]Verdict{{Node: "liar", Peer: "p1", State: StateDead, At: 12}})
	me.accept(b, true)
	if !p1.Health().Suspect() {
		t.Fatal("a death after suspectEvery was not applied")
	}
	// An honest member's death is not held back by the liar's spacing.
	alive(r, p1)
	b, _ = honest.seal([]Verdict{{Node: "honest", Peer: "p1", State: StateDead, At: 13}})
	me.accept(b, true)
	if !p1.Health().Suspect() {
		t.Fatal("honest's death verdict was rate-limited by the liar's")
	}
}

func mustEncode(t *testing.T, vs ...Verdict) []byte {
	b, err := encode(vs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzForgedVerdicts: whatever a member with the fleet key signs, a
// verdict is applied only in its own name, never from the future, and
// only about a peer the receiver has; nothing else is kept.
func FuzzForgedVerdicts(f *testing.F) {
	f.Add("liar", "p1", int64(5), "dead", "127.0.0.1:3128")
	f.Add("honest", "p1", int64(5), "dead", "")
	f.Add("liar", "p1", int64(math.MaxInt64), "alive", "")
	f.Add("liar", "zz", int64(1), "dead", "127.0.0.1:3128")
	f.Fuzz(func(t *testing.T, node, peer string, at int64, state, addr string) {
		r := newRegistry(t, peers.Spec{Name: "p1", Host: "127.0.0.1", Port: 3128})
		log, _ := test.NewNullLogger()
		fl := New(r, log)
		me, honest, liar := testMember(fl, "me"), testMember(fl, "honest"), testMember(fl, "liar")
		me.keyOf = keysOf(honest, liar)
		alive(r, r.Get("p1"))
		b, err := liar.seal([]Verdict{{Node: node, Peer: peer, Addr: addr, State: state, At: at}})
		if err != nil {
			return
		}
		me.accept(b, true)
		for n, view := range fl.views {
			if n != "liar" || node != "liar" {
				t.Fatalf("kept a view for %q from a message the liar signed as %q", n, node)
			}
			for _, v := range view {
				if v.At > t0.Add(maxSkew).UnixNano() {
					t.Fatalf("kept a verdict from the future: %+v", v)
				}
				if fl.local(v) == nil {
					t.Fatalf("kept a verdict about a peer not ours: %+v", v)
				}
			}
		}
		if r.Get("p1").Health().Suspect() && (node != "liar" || state != StateDead) {
			t.Fatalf("p1 made suspect by %+v", Verdict{Node: node, Peer: peer, Addr: addr, State: state, At: at})
		}
	})
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

// TestUndecryptableSummed: datagrams under another key are debug lines,
// summed up by one warning, however many arrive.
func TestUndecryptableSummed(t *testing.T) {
	var undecryptable decryptFailures
	log, hook := test.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	w := logWriter{log, &undecryptable}
	for i := 0; i < 50; i++ {
		w.Write([]byte("[ERR] memberlist: Decrypt packet failed: cipher: message authentication failed from=127.0.0.1:7946\n"))
	}
	warnings, debugs := 0, 0
	for _, e := range hook.AllEntries() {
		switch e.Level {
		case logrus.WarnLevel:
			warnings++
		case logrus.DebugLevel:
			debugs++
		default:
			t.Errorf("a %v line: %s", e.Level, e.Message)
		}
	}
	if warnings != 0 || debugs != 50 {
		t.Fatalf("%d warnings and %d debug lines for 50 undecryptable datagrams in a minute; want 0 and 50", warnings, debugs)
	}
	undecryptable.mu.Lock()
	undecryptable.last = time.Now().Add(-time.Minute)
	undecryptable.mu.Unlock()
	w.Write([]byte("[ERR] memberlist: Decrypt packet failed: x\n"))
	w.Write([]byte("[ERR] memberlist: Decrypt packet failed: x\n"))
	var sums []*logrus.Entry
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel {
			sums = append(sums, e)
		}
	}
	if len(sums) != 1 || sums[0].Data["count"] != int64(51) {
		t.Fatalf("summaries %v; want one warning counting the 51 datagrams of the minute", sums)
	}
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
	w := logWriter{log, new(decryptFailures)}
	for _, line := range []string{"[ERR] memberlist: a", "[WARN] memberlist: b", "[INFO] memberlist: c", "[DEBUG] memberlist: d", "plain"} {
		w.Write([]byte(line + "\n"))
	}
	want := []logrus.Level{logrus.ErrorLevel, logrus.WarnLevel, logrus.InfoLevel, logrus.DebugLevel, logrus.DebugLevel}
	if n := len(hook.AllEntries()); n != len(want) {
		t.Fatalf("%d entries for %d lines", n, len(want))
	}
	for i, e := range hook.AllEntries() {
		if e.Level != want[i] || strings.Contains(e.Message, "[") {
			t.Errorf("line %d: %v %q; want level %v without the bracket", i, e.Level, e.Message, want[i])
		}
	}
}

// TestAnswerDeathGossiped: a death by answers travels with its cause; the
// other member's peer turns suspect and is settled by an HTTP probe (a
// TCP connect would pass a parent that accepts but does not answer).
func TestAnswerDeathGossiped(t *testing.T) {
	// Two parents: max_answer_dead (50%) lets one of them die by answers.
	r := newRegistry(t, peers.Spec{Name: "p1", Host: "127.0.0.1", Port: 3128}, peers.Spec{Name: "p2", Host: "127.0.0.2", Port: 3128})
	log, _ := test.NewNullLogger()
	f := New(r, log)
	m := testMember(f, "b")
	p1 := r.Get("p1")
	alive(r, p1)
	f.receive(m, []Verdict{{Node: "a", Peer: "p1", State: StateDead, At: 10, Cause: "answer"}}, nil)
	if !p1.Health().Suspect() || p1.Health().ProbeKind() != "http" {
		t.Fatalf("p1 suspect %v probe %q; want suspect, probed over HTTP", p1.Health().Suspect(), p1.Health().ProbeKind())
	}
	alive(r, p1) // a TCP probe connects: not enough
	if !p1.Health().Suspect() {
		t.Fatal("a connect settled a suspicion of bad answers")
	}
	r.Observe(p1, peers.Outcome{Event: peers.HTTPProbed, Class: peers.AnswerOK, Err: nil, At: t0})
	if p1.Health().Suspect() {
		t.Fatal("a good HTTP probe did not settle it")
	}
	// This member publishes its own answer death with the cause.
	f2 := New(r, log)
	m2 := testMember(f2, "me")
	f2.cur.Store(m2)
	for i := 0; i < 5; i++ {
		r.Observe(p1, peers.Outcome{Event: peers.Answered, Class: peers.AnswerLate, FirstByte: 0, At: t0})
	}
	f2.publish(t0, nil, true)
	if v := f2.own["p1"]; v.State != StateDead || v.Cause != "answer" {
		t.Fatalf("own verdict %+v; want dead with cause answer", v)
	}
}
