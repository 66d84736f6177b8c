package icp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/peerd/peerd/peers"
	"github.com/sirupsen/logrus/hooks/test"
)

// Byte strings written from RFC 2186 section 1.2 (the header) and 2
// (the opcodes' payloads).
var (
	// ICP_OP_QUERY, version 2, length 37, request number 0x01020304, no
	// options, sender 10.0.0.1, requester 10.0.0.2, "http://a.b/x\0".
	rfcQuery = []byte{
		1, 2, 0, 37,
		1, 2, 3, 4,
		0, 0, 0, 0,
		0, 0, 0, 0,
		10, 0, 0, 1,
		10, 0, 0, 2,
		'h', 't', 't', 'p', ':', '/', '/', 'a', '.', 'b', '/', 'x', 0,
	}
	// ICP_OP_HIT answering it: the URL without a requester address.
	rfcHit = []byte{
		2, 2, 0, 33,
		1, 2, 3, 4,
		0, 0, 0, 0,
		0, 0, 0, 0,
		0, 0, 0, 0,
		'h', 't', 't', 'p', ':', '/', '/', 'a', '.', 'b', '/', 'x', 0,
	}
)

func TestParseRFCBytes(t *testing.T) {
	var m Message
	if err := m.Parse(rfcQuery); err != nil {
		t.Fatal(err)
	}
	if m.Op != OpQuery || m.Version != 2 || m.ReqNum != 0x01020304 || m.Sender != [4]byte{10, 0, 0, 1} ||
		m.Requester != [4]byte{10, 0, 0, 2} || string(m.URL) != "http://a.b/x" {
		t.Fatalf("query parsed as %+v", m)
	}
	if got := m.Append(nil); !bytes.Equal(got, rfcQuery) {
		t.Fatalf("query written as % x; want % x", got, rfcQuery)
	}
	if err := m.Parse(rfcHit); err != nil || m.Op != OpHit || string(m.URL) != "http://a.b/x" || m.ReqNum != 0x01020304 {
		t.Fatalf("hit parsed as %+v, %v", m, err)
	}
	reply := Message{Op: OpHit, ReqNum: 0x01020304, URL: []byte("http://a.b/x")}
	if got := reply.Append(nil); !bytes.Equal(got, rfcHit) {
		t.Fatalf("hit written as % x; want % x", got, rfcHit)
	}
	for _, op := range []Opcode{OpMiss, OpErr, OpMissNoFetch, OpDenied} {
		b := (&Message{Op: op, ReqNum: 7, URL: []byte("http://x/")}).Append(nil)
		if err := m.Parse(b); err != nil || m.Op != op || m.ReqNum != 7 {
			t.Errorf("%v round trip: %+v %v", op, m, err)
		}
	}
}

func TestParseRejects(t *testing.T) {
	withLen := func(b []byte, n int) []byte {
		c := append([]byte(nil), b...)
		c[2], c[3] = byte(n>>8), byte(n)
		return c
	}
	noNUL := append([]byte(nil), rfcHit[:len(rfcHit)-1]...)
	for _, c := range []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrShort},
		{"short header", rfcQuery[:19], ErrShort},
		{"length too long", withLen(rfcQuery, 40), ErrLength},
		{"length too short", withLen(rfcQuery, 20), ErrLength},
		{"truncated datagram", rfcQuery[:30], ErrLength},
		{"version 1", func() []byte { c := append([]byte(nil), rfcHit...); c[1] = 1; return c }(), ErrVersion},
		{"opcode 99", func() []byte { c := append([]byte(nil), rfcHit...); c[0] = 99; return c }(), ErrOpcode},
		{"opcode invalid", func() []byte { c := append([]byte(nil), rfcHit...); c[0] = 0; return c }(), ErrOpcode},
		{"no NUL", withLen(noNUL, len(noNUL)), ErrURL},
		{"empty URL", withLen(append(append([]byte(nil), rfcHit[:20]...), 0), 21), ErrURL},
		{"query without requester", withLen(append([]byte{1}, rfcHit[1:22]...), 22), ErrURL},
	} {
		var m Message
		if err := m.Parse(c.in); !errors.Is(err, c.want) {
			t.Errorf("%s: %v; want %v", c.name, err, c.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(rfcQuery)
	f.Add(rfcHit)
	f.Add([]byte{3, 3, 0, 22, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 'x', 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Message
		if m.Parse(b) != nil {
			return
		}
		// What parses is written back to the same message.
		out := m.Append(nil)
		var m2 Message
		if err := m2.Parse(out); err != nil {
			t.Fatalf("re-parse of % x: %v", out, err)
		}
		if m2.Op != m.Op || m2.ReqNum != m.ReqNum || !bytes.Equal(m2.URL, m.URL) || m2.Requester != m.Requester {
			t.Fatalf("round trip changed %+v to %+v", m, m2)
		}
		if bytes.IndexByte(m.URL, 0) >= 0 || len(m.URL) == 0 {
			t.Fatalf("URL %q", m.URL)
		}
	})
}

type fakeStore map[string]bool

func (s fakeStore) ICPHit(u []byte) bool { return s[string(u)] }

func newRegistry(t *testing.T, specs ...peers.Spec) *peers.Registry {
	t.Helper()
	log, _ := test.NewNullLogger()
	r, err := peers.New(peers.Options{Health: peers.DefaultConfig(), ConnectTimeout: time.Second, Log: log}, specs)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func alive(r *peers.Registry, name string) {
	r.Observe(r.Get(name), peers.Outcome{At: time.Now(), RTT: time.Millisecond, Probe: true})
}

func TestServerAnswers(t *testing.T) {
	reg := newRegistry(t, peers.Spec{Name: "p1", Host: "127.0.0.1", Port: 1})
	direct := false
	s := &Server{o: ServerOptions{Store: fakeStore{"http://a.b/x": true}, Registry: reg,
		Allowed:       func(a netip.Addr) bool { return a.IsLoopback() },
		DirectAllowed: func() bool { return direct }}}
	local := netip.MustParseAddrPort("127.0.0.1:5000")
	query := func(u string) []byte {
		return (&Message{Op: OpQuery, ReqNum: 42, URL: []byte(u)}).Append(nil)
	}
	ask := func(in []byte, from netip.AddrPort) (Message, bool) {
		var m Message
		out, _ := s.answer(in, from, &m, nil)
		if len(out) == 0 {
			return Message{}, false
		}
		var r Message
		if err := r.Parse(out); err != nil {
			t.Fatalf("answer % x: %v", out, err)
		}
		return r, true
	}
	// p1 is unknown and DIRECT is off: nothing could fetch a miss.
	if r, _ := ask(query("http://a.b/y"), local); r.Op != OpMissNoFetch || r.ReqNum != 42 || string(r.URL) != "http://a.b/y" {
		t.Fatalf("with no live next hop: %v %+v; want MISS_NOFETCH echoing the request", r.Op, r)
	}
	if r, _ := ask(query("http://a.b/x"), local); r.Op != OpHit {
		t.Fatalf("a stored URL: %v; want HIT", r.Op)
	}
	alive(reg, "p1")
	if r, _ := ask(query("http://a.b/y"), local); r.Op != OpMiss {
		t.Fatalf("a miss with a live parent: %v; want MISS", r.Op)
	}
	reg.SetAdminState("p1", peers.Maintenance)
	direct = true
	if r, _ := ask(query("http://a.b/y"), local); r.Op != OpMiss {
		t.Fatalf("a miss with DIRECT allowed: %v; want MISS", r.Op)
	}
	if r, _ := ask(query("http://a.b/x"), netip.MustParseAddrPort("192.0.2.1:5000")); r.Op != OpDenied {
		t.Fatalf("a source outside allow: %v; want DENIED", r.Op)
	}
	for _, junk := range [][]byte{nil, {1, 2, 3}, rfcHit, query("http://a.b/x")[:25]} {
		if _, ok := ask(junk, local); ok {
			t.Errorf("answered % x; malformed datagrams and non-queries are dropped", junk)
		}
	}
	st := s.Stats()
	if st.Queries != 5 || st.Hits != 1 || st.Misses != 2 || st.MissNoFetch != 1 || st.Denied != 1 || st.Malformed != 4 {
		t.Fatalf("stats %+v", st)
	}
}

// Answering a query allocates nothing.
func TestServerAnswerAllocatesNothing(t *testing.T) {
	reg := newRegistry(t, peers.Spec{Name: "p1", Host: "127.0.0.1", Port: 1})
	alive(reg, "p1")
	s := &Server{o: ServerOptions{Store: fakeStore{"http://a.b/x": true}, Registry: reg, Allowed: func(netip.Addr) bool { return true }}}
	in := (&Message{Op: OpQuery, ReqNum: 1, URL: []byte("http://a.b/x")}).Append(nil)
	out := make([]byte, 0, MaxLen)
	var m Message
	from := netip.MustParseAddrPort("127.0.0.1:1")
	if n := testing.AllocsPerRun(100, func() { out, _ = s.answer(in, from, &m, out[:0]) }); n != 0 {
		t.Fatalf("%v allocations per answer", n)
	}
}

// fakeICPPeer answers queries on a loopback UDP socket with op (or not at
// all when op is OpInvalid).
type fakeICPPeer struct {
	conn *net.UDPConn
	op   chan Opcode
}

func newFakeICPPeer(t *testing.T, op Opcode) *fakeICPPeer {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeICPPeer{conn: c, op: make(chan Opcode, 1)}
	f.op <- op
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, MaxLen)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			var m Message
			if m.Parse(buf[:n]) != nil {
				continue
			}
			op := <-f.op
			f.op <- op
			if op == OpInvalid {
				continue
			}
			c.WriteToUDPAddrPort((&Message{Op: op, ReqNum: m.ReqNum, URL: m.URL}).Append(nil), from)
		}
	}()
	return f
}

func (f *fakeICPPeer) port() int     { return f.conn.LocalAddr().(*net.UDPAddr).Port }
func (f *fakeICPPeer) set(op Opcode) { <-f.op; f.op <- op }

func TestQueryPicks(t *testing.T) {
	s1 := newFakeICPPeer(t, OpMiss)
	p1 := newFakeICPPeer(t, OpMiss)
	p2 := newFakeICPPeer(t, OpMiss)
	reg := newRegistry(t,
		peers.Spec{Name: "s1", Host: "127.0.0.1", Port: 1, Type: peers.Sibling, ICPPort: s1.port()},
		peers.Spec{Name: "p1", Host: "127.0.0.1", Port: 2, ICPPort: p1.port()},
		peers.Spec{Name: "p2", Host: "127.0.0.1", Port: 3, ICPPort: p2.port()},
		peers.Spec{Name: "noicp", Host: "127.0.0.1", Port: 4})
	for _, n := range []string{"s1", "p1", "p2", "noicp"} {
		alive(reg, n)
	}
	log, _ := test.NewNullLogger()
	q, err := NewQuerier(reg, log, Timeout(time.Second), "")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()

	first, code, asked, timedOut := q.Query(ctx, []byte("http://a/1"))
	if !asked || first == nil || code != "FIRST_PARENT_MISS" || (first.Name() != "p1" && first.Name() != "p2") || timedOut {
		t.Fatalf("all MISS: %v %q %v timed out %v; want the first parent to answer, FIRST_PARENT_MISS, every answer in time", first, code, asked, timedOut)
	}
	s1.set(OpHit)
	if first, code, _, _ := q.Query(ctx, []byte("http://a/2")); first == nil || first.Name() != "s1" || code != "SIBLING_HIT" {
		t.Fatalf("sibling HIT: %v %q", first, code)
	}
	s1.set(OpMiss)
	p2.set(OpHit)
	if first, code, _, _ := q.Query(ctx, []byte("http://a/3")); first == nil || first.Name() != "p2" || code != "PARENT_HIT" {
		t.Fatalf("parent HIT: %v %q", first, code)
	}
	// A dead peer is not asked.
	for range reg.Get("p2").ConnectFailLimit() {
		reg.Observe(reg.Get("p2"), peers.Outcome{At: time.Now(), Err: errors.New("refused")})
	}
	before := reg.Get("p2").Health().ICP().Queries()
	q.Query(ctx, []byte("http://a/4"))
	if reg.Get("p2").Health().ICP().Queries() != before {
		t.Fatal("a dead peer was queried")
	}
	if s := reg.Get("s1").Health().Snapshot().ICP; s.Queries != 4 || s.Hits != 1 || s.Misses != 3 || s.MeanRTT <= 0 {
		t.Fatalf("s1 ICP counters %+v", s)
	}
	// No ICP peers at all: nothing asked.
	reg2 := newRegistry(t, peers.Spec{Name: "x", Host: "127.0.0.1", Port: 1})
	alive(reg2, "x")
	q2, _ := NewQuerier(reg2, log, Auto, "127.0.0.1")
	defer q2.Close()
	if _, _, asked, _ := q2.Query(ctx, []byte("http://a/")); asked {
		t.Fatal("asked with no ICP peer")
	}
}

// quietingPeer is a querier on a fake clock, and its one sibling s1, alive
// and answering MISS until the test says otherwise.
func quietingPeer(t *testing.T) (*Querier, *peers.Registry, *fakeICPPeer, *atomic.Int64) {
	s1 := newFakeICPPeer(t, OpMiss)
	reg := newRegistry(t, peers.Spec{Name: "s1", Host: "127.0.0.1", Port: 1, Type: peers.Sibling, ICPPort: s1.port()})
	alive(reg, "s1")
	log, _ := test.NewNullLogger()
	q, err := NewQuerier(reg, log, Timeout(20*time.Millisecond), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	clock := new(atomic.Int64)
	clock.Store(time.Now().UnixNano())
	q.now = func() time.Time { return time.Unix(0, clock.Load()) }
	return q, reg, s1, clock
}

// A peer that stops answering queries it used to answer is marked
// suspect (and so probed) after DeadPeerTimeout, and is no longer waited
// for; a peer that answers again is.
func TestQuerySilentPeer(t *testing.T) {
	q, reg, s1, clock := quietingPeer(t)
	ctx := context.Background()
	q.Query(ctx, []byte("http://a/1")) // answered
	s1.set(OpInvalid)
	if _, _, _, timedOut := q.Query(ctx, []byte("http://a/2")); !timedOut { // unanswered
		t.Fatal("an unanswered query did not report its timeout (TIMEOUT_ in the access log)")
	}
	if reg.Get("s1").Health().Suspect() {
		t.Fatal("suspect after one unanswered query")
	}
	clock.Add(int64(DeadPeerTimeout + time.Second))
	q.Query(ctx, []byte("http://a/3"))
	p := reg.Get("s1")
	if !p.Health().Suspect() || p.Health().State() != peers.Alive {
		t.Fatalf("s1 after %v of silence: %v suspect=%v; want alive and suspect (probed)", DeadPeerTimeout, p.Health().State(), p.Health().Suspect())
	}
	if s := p.Health().Snapshot().ICP; s.Timeouts != 2 {
		t.Fatalf("timeouts %d; want 2", s.Timeouts)
	}
	// Not waited for any more: the query does not wait for its timeout
	// (no timeout is counted), but the peer is still asked.
	if _, _, asked, timedOut := q.Query(ctx, []byte("http://a/4")); !asked || timedOut {
		t.Fatalf("asked %v, timed out %v; a silent peer is still asked (to hear it again), and not waited for", asked, timedOut)
	}
	if s := p.Health().Snapshot().ICP; s.Timeouts != 2 || s.Queries != 4 {
		t.Fatalf("after a query to the silent peer: %d timeouts, %d queries; want 2 (not waited for) and 4 (still asked)", s.Timeouts, s.Queries)
	}
	s1.set(OpHit)
	q.Query(ctx, []byte("http://a/5")) // heard again (late or not)
	deadline := time.Now().Add(2 * time.Second)
	for {
		if first, _, _, _ := q.Query(ctx, []byte("http://a/6")); first != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a peer answering again is not waited for")
		}
	}
}

// Queries go out from the source address given, and a reload can move it.
func TestQuerySourceMoves(t *testing.T) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg := newRegistry(t, peers.Spec{Name: "s1", Host: "127.0.0.1", Port: 1, Type: peers.Sibling, ICPPort: c.LocalAddr().(*net.UDPAddr).Port})
	alive(reg, "s1")
	log, _ := test.NewNullLogger()
	q, err := NewQuerier(reg, log, Timeout(10*time.Millisecond), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	from := func() string {
		q.Query(context.Background(), []byte("http://a/"))
		buf := make([]byte, MaxLen)
		c.SetReadDeadline(time.Now().Add(time.Second))
		_, a, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatal(err)
		}
		return a.Addr().String()
	}
	if got := from(); got != "127.0.0.1" {
		t.Fatalf("query from %s; want 127.0.0.1", got)
	}
	if err := q.SetSource("127.0.0.2"); err != nil {
		t.Fatal(err)
	}
	if got := from(); got != "127.0.0.2" {
		t.Fatalf("query from %s after the move; want 127.0.0.2", got)
	}
	if err := q.SetSource("not-an-ip"); err == nil {
		t.Fatal("a bad source address was accepted")
	}
}

// TestQueryByReachedAddress: a peer named by a host name is asked at the
// address its last connect reached (the registry's), never by a look-up
// of the querier's own; one never reached is neither asked nor waited
// for.
func TestQueryByReachedAddress(t *testing.T) {
	p1 := newFakeICPPeer(t, OpHit)
	reg := newRegistry(t,
		peers.Spec{Name: "named", Host: "parent.invalid", Port: 1, ICPPort: p1.port()},
		peers.Spec{Name: "never", Host: "other.invalid", Port: 2, ICPPort: p1.port()})
	reg.Observe(reg.Get("named"), peers.Outcome{At: time.Now(), RTT: time.Millisecond, Probe: true, Addr: netip.MustParseAddr("127.0.0.1")})
	alive(reg, "never") // alive, but no address known
	log, _ := test.NewNullLogger()
	q, err := NewQuerier(reg, log, Timeout(time.Second), "")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	first, code, asked, _ := q.Query(context.Background(), []byte("http://a/1"))
	if !asked || first == nil || first.Name() != "named" || code != "PARENT_HIT" {
		t.Fatalf("%v %q %v; want named's HIT from its reached address", first, code, asked)
	}
	if n := reg.Get("never").Health().ICP().Queries(); n != 0 {
		t.Fatalf("a peer with no known address was queried %d times", n)
	}
}

// TestQueryDeadPeerTimeoutSetting: [icp] dead_peer_timeout (Squid's
// dead_peer_timeout) sets how long a peer may stay quiet: with a minute,
// 11 s of silence leave it as it was, 61 s make it suspect.
func TestQueryDeadPeerTimeoutSetting(t *testing.T) {
	q, reg, s1, clock := quietingPeer(t)
	q.SetDeadPeerTimeout(time.Minute)
	ctx := context.Background()
	q.Query(ctx, []byte("http://a/1")) // answered
	s1.set(OpInvalid)
	q.Query(ctx, []byte("http://a/2")) // unanswered: the silence starts
	clock.Add(int64(11 * time.Second))
	q.Query(ctx, []byte("http://a/3"))
	if reg.Get("s1").Health().Suspect() {
		t.Fatal("suspect after 11 s of silence with dead_peer_timeout = 1m")
	}
	clock.Add(int64(50 * time.Second))
	q.Query(ctx, []byte("http://a/4"))
	if !reg.Get("s1").Health().Suspect() {
		t.Fatal("not suspect after 61 s of silence with dead_peer_timeout = 1m")
	}
}

// TestServerDeniedBounded: DENIED answers to one source stop after a
// small burst (a forged source is not flooded), other sources are still
// answered, all of them together are bounded too, and time restores it.
func TestServerDeniedBounded(t *testing.T) {
	reg := newRegistry(t, peers.Spec{Name: "p1", Host: "127.0.0.1", Port: 1})
	now := time.Unix(1_000_000, 0)
	s := &Server{o: ServerOptions{Registry: reg, Allowed: func(netip.Addr) bool { return false }}}
	s.denials.now = func() time.Time { return now }
	in := (&Message{Op: OpQuery, ReqNum: 1, URL: []byte("http://a.b/x")}).Append(nil)
	ask := func(from string) bool {
		var m Message
		out, _ := s.answer(in, netip.MustParseAddrPort(from), &m, nil)
		return len(out) > 0
	}
	answered := 0
	for range 50 {
		if ask("192.0.2.1:3130") {
			answered++
		}
	}
	if answered != denyBurst {
		t.Fatalf("%d of 50 denied queries from one source answered; want %d", answered, denyBurst)
	}
	if !ask("192.0.2.2:3130") {
		t.Fatal("another source was not answered")
	}
	answered = 0
	for i := range 200 {
		if ask(fmt.Sprintf("198.51.100.%d:3130", i)) {
			answered++
		}
	}
	if answered > denyAllBurst {
		t.Fatalf("%d DENIED answers to 200 sources at once; want at most %d in all", answered, denyAllBurst)
	}
	now = now.Add(time.Minute)
	if !ask("192.0.2.1:3130") {
		t.Fatal("the first source is still not answered a minute later")
	}
	if st := s.Stats(); st.Denied != 252 || st.Silenced == 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestQueryNumbersAndURLs: request numbers are not sequential, and an
// answer naming another URL (a forgery that got the number right) is not
// taken for an answer.
func TestQueryNumbersAndURLs(t *testing.T) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	nums := make(chan uint32, 100)
	go func() {
		buf := make([]byte, MaxLen)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			var m Message
			if m.Parse(buf[:n]) != nil {
				continue
			}
			nums <- m.ReqNum
			// HIT, the number right, another URL.
			c.WriteToUDPAddrPort((&Message{Op: OpHit, ReqNum: m.ReqNum, URL: []byte("http://forged.example/")}).Append(nil), from)
		}
	}()
	reg := newRegistry(t, peers.Spec{Name: "p1", Host: "127.0.0.1", Port: 1, ICPPort: c.LocalAddr().(*net.UDPAddr).Port})
	alive(reg, "p1")
	log, _ := test.NewNullLogger()
	q, err := NewQuerier(reg, log, Timeout(50*time.Millisecond), "")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for i := range 5 {
		if first, code, _, _ := q.Query(context.Background(), []byte(fmt.Sprintf("http://a/%d", i))); first != nil || code != "" {
			t.Fatalf("an answer about another URL was taken: %v %q", first, code)
		}
	}
	var got []uint32
	for range 5 {
		got = append(got, <-nums)
	}
	sequential := true
	for i := 1; i < len(got); i++ {
		sequential = sequential && got[i] == got[i-1]+1
	}
	if sequential {
		t.Fatalf("request numbers %v are sequential", got)
	}
	for deadline := time.Now().Add(5 * time.Second); q.Stray() < 5; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d stray answers; want the 5 forged ones counted", q.Stray())
		}
	}
}
