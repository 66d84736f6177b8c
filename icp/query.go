package icp

// This file holds the ICP querier: asking peers, tracking their answers and
// round-trip times.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peerd/peerd/peers"
	"github.com/sirupsen/logrus"
)

// DeadPeerTimeout is the default of [icp] dead_peer_timeout: how long a
// peer that used to answer may leave queries unanswered before it is
// marked suspect and probed (Squid dead_peer_timeout).
const DeadPeerTimeout = 10 * time.Second

// Querier asks peers by ICP before a GET or HEAD is planned. It is safe
// for concurrent use.
type Querier struct {
	reg  *peers.Registry
	log  logrus.FieldLogger
	conn atomic.Pointer[net.UDPConn]
	now  func() time.Time
	src  string // the source address in use
	wg   sync.WaitGroup

	timeout atomic.Int64 // Timeout; 0: auto
	silence atomic.Int64 // dead_peer_timeout, nanoseconds

	mu      sync.Mutex
	pending map[uint32]*query
	track   map[*peers.Peer]*tracking

	malformed, stray atomic.Int64
}

// tracking is what the querier remembers of a peer between queries, to
// tell a peer that stopped answering.
type tracking struct {
	replied       bool  // ever answered
	lastReply     int64 // Unix ns
	unansweredAt  int64 // first query since lastReply still unanswered; 0: none
	silent        bool  // marked suspect for silence; not waited for until it answers
	timedOutFresh bool  // never answered and timed out: not waited for
	lastSent      int64 // the last query sent (Unix ns), for a late answer's round trip
}

type query struct {
	sent    time.Time
	peers   []*peers.Peer
	url     []byte // what was asked: an answer must name it
	addrs   []netip.AddrPort
	replied []bool
	replies chan reply
}

type reply struct {
	i   int
	op  Opcode
	rtt time.Duration
}

// NewQuerier opens the querier's UDP socket and starts reading answers.
// The socket is an ephemeral port on source, the address queries go out
// from ("" for any; cmd/peerd passes the [icp] listen address's IP, as
// Squid sends its queries from its ICP address). Squid ignores ICP
// datagrams from its own ICP address, so peerd and a Squid on one host
// need different addresses.
func NewQuerier(reg *peers.Registry, log logrus.FieldLogger, timeout Timeout, source string) (*Querier, error) {
	q := &Querier{reg: reg, log: log.WithField("component", "icp"), now: time.Now,
		pending: map[uint32]*query{}, track: map[*peers.Peer]*tracking{}}
	q.SetTimeout(timeout)
	q.SetDeadPeerTimeout(DeadPeerTimeout)
	if err := q.SetSource(source); err != nil {
		return nil, err
	}
	return q, nil
}

// SetSource moves the socket queries go out from to source (a reload
// that moves [icp] listen). The old socket is closed; answers still on
// their way to it are lost (and the peers asked are timed out as usual).
func (q *Querier) SetSource(source string) error {
	if c := q.conn.Load(); c != nil && source == q.src {
		return nil
	}
	la := &net.UDPAddr{}
	if source != "" {
		ip := net.ParseIP(source)
		if ip == nil {
			return fmt.Errorf("icp: %q is not an IP address to send queries from", source)
		}
		if !ip.IsUnspecified() {
			la.IP = ip
		}
	}
	conn, err := net.ListenUDP("udp", la)
	if err != nil {
		return err
	}
	q.src = source
	old := q.conn.Swap(conn)
	q.wg.Add(1)
	go q.read(conn)
	if old != nil {
		old.Close()
	}
	return nil
}

// SetTimeout changes the query timeout (a reload).
func (q *Querier) SetTimeout(t Timeout) { q.timeout.Store(int64(t)) }

// SetDeadPeerTimeout changes how long a peer that used to answer may stay
// quiet before it is marked suspect and probed (a reload).
func (q *Querier) SetDeadPeerTimeout(d time.Duration) { q.silence.Store(int64(d)) }

// Close stops the querier.
func (q *Querier) Close() error {
	err := q.conn.Load().Close()
	q.wg.Wait()
	return err
}

// Malformed counts answers that were not ICP; Stray counts well-formed
// ones nobody was waiting for (late, or from an unknown source).
func (q *Querier) Malformed() int64 { return q.malformed.Load() }
func (q *Querier) Stray() int64     { return q.stray.Load() }

// Query asks every live, enabled peer with an ICP port about url and
// waits for answers up to the query timeout. The first HIT wins
// (SIBLING_HIT or PARENT_HIT); failing that, the first parent that
// answered MISS (FIRST_PARENT_MISS); failing that, first is nil and the
// normal policy applies. asked reports whether any peer was queried (the
// siblings asked are then not asked again over HTTP). timedOut reports
// that the query timeout passed before every expected answer came (Squid
// then logs the hierarchy code with a TIMEOUT_ prefix). Dead peers are
// never queried: ICP revives no one.
func (q *Querier) Query(ctx context.Context, url []byte) (first *peers.Peer, code string, asked, timedOut bool) {
	var targets []*peers.Peer
	for _, p := range q.reg.Set().ICP {
		if p.Health().State() == peers.Alive && p.Health().AdminState() == peers.Enabled {
			targets = append(targets, p)
		}
	}
	if len(targets) == 0 {
		return nil, "", false, false
	}
	qu := &query{url: url, peers: targets, addrs: make([]netip.AddrPort, len(targets)), replied: make([]bool, len(targets)), replies: make(chan reply, len(targets))}
	now := q.now()
	expected := 0
	var rttSum time.Duration
	rttN := 0
	q.mu.Lock()
	// A request number no one can guess (a sequential one would let an
	// off-path sender forge a HIT for the next query) and no query in
	// flight holds.
	num := rand.Uint32()
	for num == 0 || q.pending[num] != nil {
		num = rand.Uint32()
	}
	msg := Message{Op: OpQuery, ReqNum: num, URL: url}
	buf := msg.Append(make([]byte, 0, HeaderLen+4+len(url)+1))
	for i, p := range targets {
		if qu.addrs[i] = q.addrLocked(p); !qu.addrs[i].IsValid() {
			continue // no address known yet: not asked, not waited for
		}
		t := q.trackLocked(p)
		if !t.silent && !t.timedOutFresh {
			expected++
			if r := p.Health().ICP().MeanRTT(); r > 0 {
				rttSum += r
				rttN++
			}
		}
		if t.unansweredAt == 0 {
			t.unansweredAt = now.UnixNano()
		}
		t.lastSent = now.UnixNano()
	}
	qu.sent = now
	q.pending[num] = qu
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		delete(q.pending, num)
		q.mu.Unlock()
	}()
	for i, p := range targets {
		if !qu.addrs[i].IsValid() {
			continue
		}
		p.Health().ICP().Query()
		if _, err := q.conn.Load().WriteToUDPAddrPort(buf, qu.addrs[i]); err != nil {
			q.log.WithFields(logrus.Fields{"peer": p.Name(), "err": err.Error()}).Debug("icp: query not sent")
		}
	}
	if expected == 0 {
		// Every peer asked has gone quiet: do not make the client wait
		// for them (the queries still go out, so one that is back is
		// heard again).
		return nil, "", true, false
	}
	timeout := time.Duration(q.timeout.Load())
	if timeout == 0 {
		timeout = MinTimeout
		if rttN > 0 {
			timeout = min(max(2*rttSum/time.Duration(rttN), MinTimeout), MaxTimeout)
		}
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var firstMiss *peers.Peer
	for got := 0; got < expected; {
		select {
		case r := <-qu.replies:
			got++
			p := targets[r.i]
			switch r.op {
			case OpHit, OpHitObj:
				if p.Type() == peers.Sibling {
					return p, "SIBLING_HIT", true, false
				}
				return p, "PARENT_HIT", true, false
			case OpMiss:
				if firstMiss == nil && p.Type() == peers.Parent {
					firstMiss = p
				}
			}
		case <-timer.C:
			q.timedOut(qu)
			timedOut = true
			got = expected
		case <-ctx.Done():
			got = expected
		}
	}
	if firstMiss != nil {
		return firstMiss, "FIRST_PARENT_MISS", true, timedOut
	}
	return nil, "", true, timedOut
}

// timedOut counts the peers that left a query unanswered and marks those
// that used to answer but have been quiet for dead_peer_timeout.
func (q *Querier) timedOut(qu *query) {
	now := q.now().UnixNano()
	dead := q.silence.Load()
	var quiet []*peers.Peer
	q.mu.Lock()
	for i, p := range qu.peers {
		if qu.replied[i] {
			continue
		}
		p.Health().ICP().Timeout()
		t := q.trackLocked(p)
		switch {
		case !t.replied:
			t.timedOutFresh = true
		case !t.silent && t.unansweredAt != 0 && now-t.unansweredAt >= dead:
			t.silent = true
			quiet = append(quiet, p)
		}
	}
	q.mu.Unlock()
	for _, p := range quiet {
		q.log.WithField("peer", p.Name()).Warnf("icp: %s %s stopped answering ICP queries", p.Type().Label(), p.Name())
		q.reg.Observe(p, peers.Outcome{Event: peers.Reported, Cause: peers.CauseProbe, Detail: "stopped answering ICP queries for " + time.Duration(dead).String() + "; probing it"})
	}
}

func (q *Querier) trackLocked(p *peers.Peer) *tracking {
	t := q.track[p]
	if t == nil {
		t = &tracking{}
		q.track[p] = t
	}
	return t
}

// addrLocked is p's ICP address: its host when that is an address, else
// the address the registry last reached it at (a live peer has one).
// Nothing here resolves a name: a DNS look-up under the querier's lock on
// every GET would stall every query behind a slow resolver.
func (q *Querier) addrLocked(p *peers.Peer) netip.AddrPort {
	port := uint16(p.ICPPort())
	if ip, err := netip.ParseAddr(p.Host()); err == nil {
		return netip.AddrPortFrom(ip.Unmap(), port)
	}
	if ip := p.Health().Reached(); ip.IsValid() {
		return netip.AddrPortFrom(ip, port)
	}
	return netip.AddrPort{}
}

// read delivers the answers arriving on conn to the queries waiting for
// them, until conn is closed.
func (q *Querier) read(conn *net.UDPConn) {
	defer q.wg.Done()
	buf := make([]byte, MaxLen)
	var m Message
	for {
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// An ICMP error surfacing on the socket, or a transient
			// one: the socket is still good.
			continue // closed
		}
		if m.Parse(buf[:n]) != nil || m.Op == OpQuery {
			q.malformed.Add(1)
			continue
		}
		q.deliver(&m, netip.AddrPortFrom(from.Addr().Unmap(), from.Port()))
	}
}

func (q *Querier) deliver(m *Message, from netip.AddrPort) {
	if p := q.deliverReply(m, from); p != nil {
		// What the reply says of the peer's own next hop: MISS_NOFETCH
		// ("do not fetch through me") cuts a parent off; any other reply
		// ends that.
		q.reg.Observe(p, peers.Outcome{Event: peers.ICPReplied, At: q.now(), NoNextHop: m.Op == OpMissNoFetch})
	}
}

// deliverReply hands m to the query it answers, and names the peer that
// sent it (nil: a stray, or a peer's late reply).
func (q *Querier) deliverReply(m *Message, from netip.AddrPort) *peers.Peer {
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	qu := q.pending[m.ReqNum]
	if qu != nil && !bytes.Equal(m.URL, qu.url) {
		// An answer about another URL: not an answer to this query (a
		// forgery, or a peer that mixed its replies up).
		q.stray.Add(1)
		return nil
	}
	if qu == nil {
		q.stray.Add(1)
		// A late answer still says the peer is there, and how slow it
		// is (the automatic timeout grows to wait for it next time).
		for p := range q.track {
			if q.addrLocked(p) == from {
				if t := q.trackLocked(p); t.lastSent != 0 {
					p.Health().ICP().Reply(m.Op == OpHit || m.Op == OpHitObj, m.Op == OpDenied, now.Sub(time.Unix(0, t.lastSent)))
				}
				q.heardLocked(p, now)
			}
		}
		return nil
	}
	for i, ap := range qu.addrs {
		if ap != from || qu.replied[i] {
			continue
		}
		qu.replied[i] = true
		p := qu.peers[i]
		rtt := now.Sub(qu.sent)
		p.Health().ICP().Reply(m.Op == OpHit || m.Op == OpHitObj, m.Op == OpDenied, rtt)
		q.heardLocked(p, now)
		qu.replies <- reply{i: i, op: m.Op, rtt: rtt} // buffered for every peer asked
		return p
	}
	q.stray.Add(1)
	return nil
}

func (q *Querier) heardLocked(p *peers.Peer, now time.Time) {
	t := q.trackLocked(p)
	t.replied, t.lastReply, t.unansweredAt, t.silent, t.timedOutFresh = true, now.UnixNano(), 0, false, false
}
