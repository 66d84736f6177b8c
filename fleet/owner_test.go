package fleet

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/peerd/peerd/peers"
	"github.com/sirupsen/logrus/hooks/test"
)

func candidates(names ...string) []Candidate {
	cs := make([]Candidate, len(names))
	for i, n := range names {
		cs[i] = Candidate{Node: n, Weight: 1}
	}
	return cs
}

func keyN(i int) []byte { return fmt.Appendf(nil, "http://origin.example/object/%d", i) }

// TestOwnerSameOnEveryMember: members that list the same candidates in
// different orders agree on every key's owner, and the keys spread evenly.
func TestOwnerSameOnEveryMember(t *testing.T) {
	cs := candidates("a", "b", "c", "d", "e")
	rng := rand.New(rand.NewPCG(1, 2))
	count := map[string]int{}
	const n = 20000
	for i := 0; i < n; i++ {
		shuffled := append([]Candidate(nil), cs...)
		rng.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		o1, o2 := Owner(keyN(i), cs, 1.25), Owner(keyN(i), shuffled, 1.25)
		if o1 != o2 {
			t.Fatalf("key %d: owner %s on one member, %s on another", i, o1, o2)
		}
		count[o1]++
	}
	for _, c := range cs {
		if got := float64(count[c.Node]) / n; got < 0.18 || got > 0.22 {
			t.Errorf("%s owns %.3f of the keys; want about 1/5", c.Node, got)
		}
	}
	if Owner(keyN(1), nil, 1.25) != "" || Owner(keyN(1), candidates("solo"), 1.25) != "solo" {
		t.Fatal("no member, or one member")
	}
}

// TestJoinAndLeaveMoveOnlyTheirKeys: of 100k keys, a fourth member
// joining takes at most 1/4 + 2 % of them, all from the others to it; a
// member leaving gives up only its own, and nothing moves between the
// others.
func TestJoinAndLeaveMoveOnlyTheirKeys(t *testing.T) {
	const n = 100000
	three := candidates("a", "b", "c")
	four := candidates("a", "b", "c", "d")
	moved := 0
	for i := 0; i < n; i++ {
		before, after := Owner(keyN(i), three, 0), Owner(keyN(i), four, 0)
		if before != after {
			moved++
			if after != "d" {
				t.Fatalf("key %d moved from %s to %s on d's join; want only to d", i, before, after)
			}
		}
	}
	if f := float64(moved) / n; f > 0.25+0.02 {
		t.Fatalf("a join moved %.3f of the keys; want at most 1/4 + 2%%", f)
	}
	moved = 0
	two := candidates("a", "c")
	for i := 0; i < n; i++ {
		before, after := Owner(keyN(i), three, 0), Owner(keyN(i), two, 0)
		if before != after {
			moved++
			if before != "b" {
				t.Fatalf("key %d moved from %s to %s on b's leave; want only b's keys", i, before, after)
			}
		}
	}
	if f := float64(moved) / n; f > 1.0/3+0.02 {
		t.Fatalf("a leave moved %.3f of the keys; want at most 1/3 + 2%%", f)
	}
}

// TestBoundedLoadUnderAHotKey: 300 fetches of one hot key start before
// any ends; with max_load 1.25 no member ever holds more than
// ceil(1.25 × the average) (or minBound), where without a bound one
// member takes all.
func TestBoundedLoadUnderAHotKey(t *testing.T) {
	for _, maxLoad := range []float64{1.25, 0} {
		cs := candidates("a", "b", "c")
		hot := []byte("http://origin.example/hot")
		for i := 0; i < 300; i++ {
			o := Owner(hot, cs, maxLoad)
			var total int64
			for k := range cs {
				if cs[k].Node == o {
					cs[k].Load++
				}
				total += cs[k].Load
			}
			if maxLoad > 0 {
				for _, c := range cs {
					if limit := max(int64(1.25*float64(total)/3)+1, minBound); c.Load > limit {
						t.Fatalf("after %d fetches %s holds %d; the bound is %d", i+1, c.Node, c.Load, limit)
					}
				}
			}
		}
		top := max(cs[0].Load, cs[1].Load, cs[2].Load)
		if maxLoad == 0 && top != 300 {
			t.Fatalf("unbounded: the hot key's owner holds %d of 300", top)
		}
		if maxLoad > 0 && top > 126 {
			t.Fatalf("bounded: one member holds %d of 300", top)
		}
	}
}

// TestMemberRequestSignature: a request signed by a member for another
// verifies there once, naming the sender, from an address the sender
// published. The same field fails for another binding (target, Host,
// Cache-Control, Range), at another member (or the sender itself), a
// second time (a replay), from another address, from a member the
// receiver does not know, garbled, or outside the window.
func TestMemberRequestSignature(t *testing.T) {
	log, _ := test.NewNullLogger()
	fa, fb, fc := New(newRegistry(t), log), New(newRegistry(t), log), New(newRegistry(t), log)
	a, b, c := testMember(fa, "a"), testMember(fb, "b"), testMember(fc, "c")
	for _, m := range []*member{a, b, c} {
		m.keyOf = keysOf(a, b, c)
		m.addrsOf = func(string) []netip.Addr { return []netip.Addr{netip.MustParseAddr("10.0.0.1")} }
	}
	fa.cur.Store(a)
	fb.cur.Store(b)
	fc.cur.Store(c)
	from, other := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.9")
	binding := []byte("GET\x00http://origin.example/x\x00origin.example:\x00\x00")
	sig := fa.Sign("b", binding)
	if _, ok := fb.Verify(sig, binding, other); ok {
		t.Fatal("a signature verified from an address its member did not publish")
	}
	if node, ok := fb.Verify(sig, binding, from); !ok || node != "a" {
		t.Fatalf("a's signature at b: %q %v", node, ok)
	}
	if _, ok := fb.Verify(sig, binding, from); ok {
		t.Fatal("a replayed signature verified")
	}
	fresh := func() []byte { return fa.Sign("b", binding) }
	for _, other := range []string{"http://origin.example/y", "GET\x00http://origin.example/x\x00evil.example:\x00\x00",
		"GET\x00http://origin.example/x\x00origin.example:\x00no-cache\x00", "GET\x00http://origin.example/x\x00origin.example:\x00\x00bytes=0-1"} {
		if _, ok := fb.Verify(fresh(), []byte(other), from); ok {
			t.Fatalf("a signature verified for another binding %q", other)
		}
	}
	if _, ok := fc.Verify(fresh(), binding, from); ok {
		t.Fatal("a signature for b verified at c")
	}
	if _, ok := fa.Verify(fresh(), binding, from); ok {
		t.Fatal("a member accepted a request signed by itself")
	}
	b.keyOf = keysOf(b)
	if _, ok := fb.Verify(fresh(), binding, from); ok {
		t.Fatal("a signature from a member b does not know verified")
	}
	b.keyOf = keysOf(a, b, c)
	sig = fresh()
	for _, bad := range []string{"", "a", "a b 1 x y", "a b notatime n " + string(sig[len(sig)-10:])} {
		if _, ok := fb.Verify([]byte(bad), binding, from); ok {
			t.Fatalf("%q verified", bad)
		}
	}
	a.now = func() time.Time { return t0.Add(-sigWindow - time.Second) }
	if _, ok := fb.Verify(fresh(), binding, from); ok {
		t.Fatal("a signature from outside the window verified")
	}
}

// FuzzMemberField: whatever a request's Peerd-Fleet-Member field and a
// member's meta hold, nothing panics, a field not made by Sign never
// verifies, and a meta's key is read from its first 32 bytes only.
func FuzzMemberField(f *testing.F) {
	f.Add([]byte("a 1700000000000 AAAA"), []byte("GET"), []byte(`{"h":"127.0.0.1:3128","l":3}`))
	f.Add([]byte("a  "), []byte(""), []byte("{"))
	f.Add([]byte("\x00 \xff \x01"), []byte("GET"), []byte(`{"h":1}`))
	log, _ := test.NewNullLogger()
	reg, err := peers.New(peers.Options{Health: peers.DefaultConfig(), ConnectTimeout: time.Second, Log: log}, nil)
	if err != nil {
		f.Fatal(err)
	}
	fb := New(reg, log)
	a := testMember(New(reg, log), "a")
	b := testMember(fb, "b")
	b.keyOf = keysOf(a, b)
	fb.cur.Store(b)
	f.Fuzz(func(t *testing.T, value, method, metaJSON []byte) {
		if _, ok := fb.Verify(value, method, netip.MustParseAddr("127.0.0.1")); ok {
			t.Fatalf("%q verified without a's key", value)
		}
		pub := a.priv.Public().(ed25519.PublicKey)
		key, _ := decodeMeta(append(append([]byte(nil), pub...), metaJSON...))
		if !bytes.Equal(key, pub) {
			t.Fatal("the key read from a meta is not its first 32 bytes")
		}
		decodeMeta(metaJSON)
	})
}
