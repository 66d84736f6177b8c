package fleet

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/peerd/peerd/peers"
	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
)

// These run real memberlist instances on loopback: they wait for gossip,
// polling with a deadline (the verdict logic itself is tested without a
// network in fleet_test.go).

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type node struct {
	f    *Fleet
	reg  *peers.Registry
	hook *test.Hook
}

func startNode(t *testing.T, name string, cfg Config) *node {
	t.Helper()
	log, hook := test.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	reg, err := peers.New(peers.Options{Health: peers.DefaultConfig(), ConnectTimeout: time.Second, Log: log},
		[]peers.Spec{{Name: "p1", Host: "127.0.0.1", Port: 1}})
	if err != nil {
		t.Fatal(err)
	}
	alive(reg, reg.Get("p1"))
	f := New(reg, log)
	if err := f.Apply(cfg, name); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go f.Run(ctx)
	t.Cleanup(func() { cancel(); f.Close() })
	return &node{f: f, reg: reg, hook: hook}
}

// logged reports whether hook holds an entry whose message starts with
// prefix.
func logged(hook *test.Hook, prefix string) bool {
	for _, e := range hook.AllEntries() {
		if strings.HasPrefix(e.Message, prefix) {
			return true
		}
	}
	return false
}

func (n *node) addr() string { return n.f.cur.Load().ml.LocalNode().Address() }

func TestFleetGossipsADeath(t *testing.T) {
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	a := startNode(t, "a", Config{Bind: "127.0.0.1:0", Key: key})
	b := startNode(t, "b", Config{Bind: "127.0.0.1:0", Key: key, Join: []string{a.addr()}})
	eventually(t, "both members see each other", func() bool { return a.f.Members() == 2 && b.f.Members() == 2 })

	pa := a.reg.Get("p1")
	for range pa.ConnectFailLimit() {
		a.reg.Observe(pa, peers.Outcome{At: t0, Err: errRefused})
	}
	pb := b.reg.Get("p1")
	eventually(t, "b marks p1 suspect on a's verdict", pb.Health().Suspect)
	if pb.Health().State() != peers.Alive {
		t.Fatalf("b's p1 is %v; gossip must not kill it", pb.Health().State())
	}
	eventually(t, "GET /fleet on b shows a's view", func() bool {
		st := b.f.Status()
		return st.Peers["p1"]["a"] == StateDead && st.Peers["p1"]["b"] == StateSuspect && len(st.Members) == 2
	})

	// A member that joins later learns a's verdict in the state exchange.
	c := startNode(t, "c", Config{Bind: "127.0.0.1:0", Key: key, Join: []string{b.addr()}})
	eventually(t, "c marks p1 suspect from the state exchange", c.reg.Get("p1").Health().Suspect)

	// A reload that turns the fleet off leaves it; the others see it go.
	if err := c.f.Apply(Config{}, "c"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a sees c leave", func() bool { return a.f.Members() == 2 })
	if c.f.Members() != 0 || c.f.Status().Enabled {
		t.Fatal("c still reports a fleet after leaving")
	}
}

func TestFleetWrongKeyCannotJoin(t *testing.T) {
	k1 := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	k2 := base64.StdEncoding.EncodeToString([]byte("fedcba9876543210"))
	a := startNode(t, "a", Config{Bind: "127.0.0.1:0", Key: k1})
	b := startNode(t, "b", Config{Bind: "127.0.0.1:0", Key: k2, Join: []string{a.addr()}})
	var line string
	eventually(t, "b says it cannot join", func() bool {
		for _, e := range b.hook.AllEntries() {
			if e.Level == logrus.ErrorLevel && strings.HasPrefix(e.Message, "fleet: cannot join") {
				line = e.Message
				return true
			}
		}
		return false
	})
	t.Logf("b: %s", line)
	for _, e := range a.hook.AllEntries() {
		if e.Level <= logrus.WarnLevel {
			t.Logf("a: %s %s", e.Level, e.Message)
		}
	}
	if !strings.Contains(line, "key") {
		t.Errorf("the join error %q does not point at the key", line)
	}
	// Wait for a retry (the fact), not for a time.
	eventually(t, "b retrying the join", func() bool { return logged(b.hook, "fleet: join retry failed") })
	n := 0
	for _, e := range b.hook.AllEntries() {
		if strings.HasPrefix(e.Message, "fleet: cannot join") && e.Level <= logrus.WarnLevel {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d error lines about the failed join; want exactly one", n)
	}
	if a.f.Members() != 1 || b.f.Members() != 1 {
		t.Fatalf("members a=%d b=%d; with different keys neither may join", a.f.Members(), b.f.Members())
	}
}

// A reload with a new key restarts gossip under it: members that all
// changed it find each other again; one left on the old key cannot join.
func TestFleetKeyChangeOnReload(t *testing.T) {
	k1 := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	k2 := base64.StdEncoding.EncodeToString([]byte("fedcba9876543210"))
	a := startNode(t, "a", Config{Bind: "127.0.0.1:0", Key: k1})
	addrA := a.addr()
	b := startNode(t, "b", Config{Bind: "127.0.0.1:0", Key: k1, Join: []string{addrA}})
	eventually(t, "a and b joined", func() bool { return a.f.Members() == 2 })
	if err := a.f.Apply(Config{Bind: addrA, Key: k2}, "a"); err != nil {
		t.Fatal(err)
	}
	if got := a.addr(); got != addrA {
		t.Fatalf("a's address moved from %s to %s on a key change", addrA, got)
	}
	addrB := b.addr()
	if err := b.f.Apply(Config{Bind: addrB, Key: k2, Join: []string{addrA}}, "b"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a and b together under the new key", func() bool { return a.f.Members() == 2 && b.f.Members() == 2 })
	c := startNode(t, "c", Config{Bind: "127.0.0.1:0", Key: k1, Join: []string{addrA}})
	eventually(t, "c's join refused", func() bool { return logged(c.hook, "fleet: cannot join") })
	if c.f.Members() != 1 || a.f.Members() != 2 {
		t.Fatalf("members c=%d a=%d; a member on the old key must not join", c.f.Members(), a.f.Members())
	}
	// Peer state is untouched by it all.
	if p := a.reg.Get("p1"); p.Health().State() != peers.Alive {
		t.Fatalf("a's p1 is %v after the reloads", p.Health().State())
	}
}

// TestFleetLyingMember: a real memberlist member with the key that lies
// (a test helper: a Fleet whose member sends what it likes) cannot speak
// for another member, freeze one with a future time, or bloat another's
// memory with verdicts about peers nobody has.
func TestFleetLyingMember(t *testing.T) {
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	a := startNode(t, "a", Config{Bind: "127.0.0.1:0", Key: key})
	b := startNode(t, "b", Config{Bind: "127.0.0.1:0", Key: key, Join: []string{a.addr()}})
	liar := startNode(t, "liar", Config{Bind: "127.0.0.1:0", Key: key, Join: []string{a.addr()}})
	eventually(t, "three members", func() bool { return b.f.Members() == 3 && liar.f.Members() == 3 })
	lm := liar.f.cur.Load()
	var bNode *memberlist.Node
	for _, n := range lm.ml.Members() {
		if n.Name == "b" {
			bNode = n
		}
	}
	send := func(vs ...Verdict) {
		t.Helper()
		msg, err := lm.seal(vs)
		if err != nil {
			t.Fatal(err)
		}
		if err := lm.ml.SendReliable(bNode, msg); err != nil {
			t.Fatal(err)
		}
	}
	// In a's name: refused.
	send(Verdict{Node: "a", Peer: "p1", Addr: "127.0.0.1:1", State: StateDead, At: time.Now().UnixNano()})
	// From the future, in its own name: not kept.
	send(Verdict{Node: "liar", Peer: "p1", Addr: "127.0.0.1:1", State: StateAlive, At: math.MaxInt64})
	// Floods of peers nobody has.
	for i := 0; i < 25; i++ {
		vs := make([]Verdict, 0, 1000)
		for j := 0; j < 1000; j++ {
			vs = append(vs, Verdict{Node: "liar", Peer: fmt.Sprintf("fake-%d-%d-%s", i, j, strings.Repeat("x", 200)), Addr: "192.0.2.1:1", State: StateDead, At: time.Now().UnixNano()})
		}
		send(vs...)
	}
	// A marker the liar may say: its own true verdict about p1.
	send(Verdict{Node: "liar", Peer: "p1", Addr: "127.0.0.1:1", State: StateSuspect, At: time.Now().UnixNano()})
	eventually(t, "b records the liar's own verdict", func() bool { return b.f.Status().Peers["p1"]["liar"] == StateSuspect })
	if b.reg.Get("p1").Health().Suspect() {
		t.Fatal("b's p1 is suspect: a forged death in a's name was applied")
	}
	st := b.f.Status()
	if len(st.Peers) != 1 || st.Peers["p1"]["a"] == StateDead {
		t.Fatalf("b's fleet view %+v; want only p1, and no forged verdict of a", st.Peers)
	}
	if !logged(b.hook, "fleet: message dropped") {
		t.Fatal("the forged message was not logged")
	}
}

// attackerDelegate is a raw memberlist member's delegate: its meta is a
// key of its own.
type attackerDelegate struct{ pub []byte }

func (d attackerDelegate) NodeMeta(int) []byte                 { return d.pub }
func (d attackerDelegate) NotifyMsg([]byte)                    {}
func (d attackerDelegate) GetBroadcasts(int, int) [][]byte     { return nil }
func (d attackerDelegate) LocalState(bool) []byte              { return nil }
func (d attackerDelegate) MergeRemoteState(buf []byte, j bool) {}

// TestFleetImpersonationRefused: a member holding the fleet key takes b's
// name and address, with a key of its own: memberlist's own refutation
// would announce it with a higher incarnation, which replaced b's key at
// c. c keeps b's pinned key (the new one is refused while b is heard),
// never takes a verdict the impostor signs in b's name, and says so.
func TestFleetImpersonationRefused(t *testing.T) {
	secret := []byte("0123456789abcdef")
	key := base64.StdEncoding.EncodeToString(secret)
	b := startNode(t, "b", Config{Bind: "127.0.0.1:0", Key: key})
	c := startNode(t, "c", Config{Bind: "127.0.0.1:0", Key: key, Join: []string{b.addr()}})
	eventually(t, "b and c see each other", func() bool { return b.f.Members() == 2 && c.f.Members() == 2 })
	bKey := c.f.cur.Load().publicKey("b")
	if bKey == nil {
		t.Fatal("c has no key for b")
	}

	impostor := testMember(New(b.reg, logrus.New()), "b")
	mc := memberlist.DefaultLocalConfig()
	mc.Name = "b"
	bPort := b.f.cur.Load().ml.LocalNode().Port
	mc.AdvertiseAddr, mc.AdvertisePort = "127.0.0.1", int(bPort)
	mc.SecretKey = secret
	mc.Delegate = attackerDelegate{pub: impostor.priv.Public().(ed25519.PublicKey)}
	mc.LogOutput = io.Discard
	// A port of its own (with port 0, memberlist would advertise it too);
	// the free UDP port may be taken for TCP by another test meanwhile, so
	// another one is tried a few times.
	var ml *memberlist.Memberlist
	for try := 0; ; try++ {
		l, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		mc.BindAddr, mc.BindPort = "127.0.0.1", l.LocalAddr().(*net.UDPAddr).Port
		l.Close()
		if ml, err = memberlist.Create(mc); err == nil {
			break
		} else if try == 9 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
	}
	defer ml.Shutdown()
	if _, err := ml.Join([]string{c.addr()}); err != nil {
		t.Fatal(err)
	}
	cm := c.f.cur.Load()
	var cNode *memberlist.Node
	for _, n := range ml.Members() {
		if n.Name == "c" {
			cNode = n
		}
	}
	if cNode == nil {
		t.Fatal("the impostor does not see c")
	}
	eventually(t, "c refuses the impostor's key for b", func() bool { return logged(c.hook, "fleet: refused a new key for a live member") })
	dropped := func() int {
		n := 0
		for _, e := range c.hook.AllEntries() {
			if e.Message == "fleet: message dropped" {
				n++
			}
		}
		return n
	}
	before := dropped()
	msg, _ := impostor.seal([]Verdict{{Node: "b", Peer: "p1", Addr: "127.0.0.1:1", State: StateDead, At: time.Now().UnixNano()}})
	if err := ml.SendReliable(cNode, msg); err != nil {
		t.Fatal(err)
	}
	eventually(t, "c drops the verdict the impostor signed in b's name", func() bool { return dropped() > before })
	if k := cm.publicKey("b"); !bytes.Equal(k, bKey) {
		t.Fatal("c took the impostor's key for b")
	}
	if c.reg.Get("p1").Health().Suspect() || c.f.Status().Peers["p1"]["b"] == StateDead {
		t.Fatal("c took a death the impostor signed in b's name")
	}
}

// TestPinsAcceptARestartedMember: a new key for a pinned name is refused
// while the old key is heard, and taken once it has been silent for
// keyQuiet, or at once after memberlist saw the member leave.
func TestPinsAcceptARestartedMember(t *testing.T) {
	log, _ := test.NewNullLogger()
	var ps pins
	k1, k2 := newKey().Public().(ed25519.PublicKey), newKey().Public().(ed25519.PublicKey)
	now := t0
	node := func(k ed25519.PublicKey) *memberlist.Node { return &memberlist.Node{Name: "x", Meta: k} }
	if err := ps.check(node(k1), now, log); err != nil {
		t.Fatalf("first sight: %v", err)
	}
	now = now.Add(keyQuiet - time.Second)
	ps.heard("x", now.Add(-time.Second))
	if err := ps.check(node(k2), now, log); err == nil {
		t.Fatal("a new key was taken while the pinned one is heard")
	}
	if !bytes.Equal(ps.key("x"), k1) {
		t.Fatal("the pinned key changed")
	}
	now = now.Add(keyQuiet)
	if err := ps.check(node(k2), now, log); err != nil || !bytes.Equal(ps.key("x"), k2) {
		t.Fatalf("after the old key was silent for keyQuiet: %v", err)
	}
	ps.drop("x")
	if err := ps.check(node(k1), now, log); err != nil || !bytes.Equal(ps.key("x"), k1) {
		t.Fatalf("after the member left: %v", err)
	}
}

// TestPlaintextConnectionsSummed: connections to the gossip port that are
// not gossip (a port scanner, an HTTP client) are debug lines, never an
// error line each.
func TestPlaintextConnectionsSummed(t *testing.T) {
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	a := startNode(t, "a", Config{Bind: "127.0.0.1:0", Key: key})
	for i := 0; i < 20; i++ {
		c, err := net.Dial("tcp", a.addr())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		c.Close()
	}
	debugs := func() int {
		n := 0
		for _, e := range a.hook.AllEntries() {
			if e.Level == logrus.DebugLevel && strings.Contains(e.Message, "memberlist") {
				n++
			}
		}
		return n
	}
	eventually(t, "the 20 connections logged at debug level", func() bool { return debugs() >= 20 })
	for _, e := range a.hook.AllEntries() {
		if e.Level <= logrus.WarnLevel {
			t.Errorf("a %v line for a plaintext connection: %s", e.Level, e.Message)
		}
	}
}

// TestFleetStartingTogetherLogsNoError: a member whose join addresses do
// not listen yet (the fleet is starting all at once) says so at info and
// retries; nothing at warning or above before aloneGrace. When the other
// member comes up it joins, and a planned leave is info, not a warning.
func TestFleetStartingTogetherLogsNoError(t *testing.T) {
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	ln, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	later := ln.LocalAddr().String() // a gossip address nobody listens on yet
	ln.Close()
	b := startNode(t, "b", Config{Bind: "127.0.0.1:0", Key: key, Join: []string{later}})
	eventually(t, "b saying it cannot join yet", func() bool { return logged(b.hook, "fleet: cannot join yet") })
	eventually(t, "b retrying", func() bool { return logged(b.hook, "fleet: join retry failed") })
	for _, e := range b.hook.AllEntries() {
		if e.Level <= logrus.WarnLevel {
			t.Errorf("b logged %s while its fleet was starting: %s", e.Level, e.Message)
		}
	}
	a := startNode(t, "a", Config{Bind: "127.0.0.1:0", Key: key, Join: []string{b.addr()}})
	eventually(t, "a and b together", func() bool { return a.f.Members() == 2 && b.f.Members() == 2 })
	if err := a.f.Apply(Config{}, "a"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b sees a leave", func() bool { return logged(b.hook, "fleet: member left") })
	for _, e := range b.hook.AllEntries() {
		if strings.HasPrefix(e.Message, "fleet: member") && e.Level <= logrus.WarnLevel {
			t.Errorf("a planned leave logged at %s: %s", e.Level, e.Message)
		}
	}
}
