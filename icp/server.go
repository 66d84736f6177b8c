package icp

// This file holds the ICP listener: answering peers' queries from the
// cache.

import (
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/peerd/peerd/peers"
	"github.com/sirupsen/logrus"
	"golang.org/x/time/rate"
)

// Store answers "is a fresh response stored for this absolute URL (a
// GET)?" without allocating; the forwarder's cache is one.
type Store interface {
	ICPHit(url []byte) bool
}

// ServerOptions wire an answering listener.
type ServerOptions struct {
	Store    Store
	Registry *peers.Registry
	// Allowed is the [proxy] allow ACL: other sources are DENIED.
	Allowed func(netip.Addr) bool
	// DirectAllowed reports whether DIRECT is a next hop; with it off and
	// no live parent, queries are answered MISS_NOFETCH.
	DirectAllowed func() bool
	// Answered, when set, is told of every query answered: the source,
	// the result as Squid's access log names it (UDP_HIT, UDP_MISS,
	// UDP_MISS_NOFETCH, UDP_DENIED), the reply's size and the URL asked
	// (bytes from the network: the callee escapes them).
	Answered func(from netip.Addr, result string, size int, url []byte)
	Log      logrus.FieldLogger
}

// Server answers ICP queries on one UDP socket: HIT for a fresh stored
// object, MISS otherwise, MISS_NOFETCH when no next hop is alive, DENIED
// to sources outside the allow list. Answering allocates nothing.
type Server struct {
	o    ServerOptions
	conn *net.UDPConn
	done chan struct{}
	// denials bounds the DENIED answers: only the serving goroutine
	// touches it.
	denials denials

	queries, hits, misses, nofetch, denied, silenced, malformed atomic.Int64
}

// denials bounds the DENIED answers sent, per source and in all: a query
// is one datagram whose source anyone can forge, so without a bound the
// listener would reflect a flood of DENIED at whoever the forger names
// (Squid likewise stops answering a client that is almost always denied).
// Past the bound a denied query is dropped without an answer.
type denials struct {
	sources map[netip.Addr]*rate.Limiter
	all     *rate.Limiter
	now     func() time.Time // nil: time.Now
}

const (
	denyBurst, denyRate       = 5, rate.Limit(1)   // per source
	denyAllBurst, denyAllRate = 50, rate.Limit(20) // in all
	denySources               = 4096
)

// allow reports whether a DENIED may be sent to from now.
func (d *denials) allow(from netip.Addr) bool {
	now := time.Now()
	if d.now != nil {
		now = d.now()
	}
	if d.sources == nil {
		d.sources = map[netip.Addr]*rate.Limiter{}
		d.all = rate.NewLimiter(denyAllRate, denyAllBurst)
	}
	l := d.sources[from]
	if l == nil {
		if len(d.sources) >= denySources {
			clear(d.sources)
		}
		l = rate.NewLimiter(denyRate, denyBurst)
		d.sources[from] = l
	}
	return l.AllowN(now, 1) && d.all.AllowN(now, 1)
}

// Serve answers on conn (a socket handed over by the process before this
// one, in a binary upgrade) until Close.
func Serve(conn *net.UDPConn, o ServerOptions) *Server {
	s := &Server{o: o, conn: conn, done: make(chan struct{})}
	go s.serve()
	return s
}

// Conn is the socket answered on (handed over in a binary upgrade).
func (s *Server) Conn() *net.UDPConn { return s.conn }

// Addr is the address answered on.
func (s *Server) Addr() net.Addr { return s.conn.LocalAddr() }

// Close stops answering.
func (s *Server) Close() error {
	err := s.conn.Close()
	<-s.done
	return err
}

func (s *Server) serve() {
	defer close(s.done)
	in := make([]byte, MaxLen)
	out := make([]byte, 0, MaxLen)
	var m Message
	for {
		n, from, err := s.conn.ReadFromUDPAddrPort(in)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// An ICMP error surfacing on the socket, or a transient
			// one: the socket is still good.
			continue
		}
		var op Opcode
		out, op = s.answer(in[:n], from, &m, out[:0])
		if len(out) > 0 {
			// Logged before it is sent: a peer that has the answer finds
			// the line written.
			if s.o.Answered != nil {
				s.o.Answered(from.Addr().Unmap(), results[op], len(out), m.URL)
			}
			s.conn.WriteToUDPAddrPort(out, from)
		}
	}
}

// results name the answers as Squid's access log does.
var results = map[Opcode]string{OpHit: "UDP_HIT", OpMiss: "UDP_MISS", OpMissNoFetch: "UDP_MISS_NOFETCH", OpDenied: "UDP_DENIED"}

// answer is the reply to one datagram (appended to out) and its opcode,
// or nothing.
func (s *Server) answer(in []byte, from netip.AddrPort, m *Message, out []byte) ([]byte, Opcode) {
	if err := m.Parse(in); err != nil || m.Op != OpQuery {
		// Not a query (or not ICP): counted and dropped, as Squid does.
		s.malformed.Add(1)
		return out, 0
	}
	s.queries.Add(1)
	reply := Message{ReqNum: m.ReqNum, URL: m.URL, Version: Version}
	switch {
	case !s.o.Allowed(from.Addr().Unmap()):
		s.denied.Add(1)
		if !s.denials.allow(from.Addr().Unmap()) {
			s.silenced.Add(1)
			return out, 0
		}
		reply.Op = OpDenied
	case s.o.Store != nil && s.o.Store.ICPHit(m.URL):
		reply.Op = OpHit
		s.hits.Add(1)
	case !s.nextHop():
		reply.Op = OpMissNoFetch
		s.nofetch.Add(1)
	default:
		reply.Op = OpMiss
		s.misses.Add(1)
	}
	return reply.Append(out), reply.Op
}

// nextHop reports whether a miss could be fetched now.
func (s *Server) nextHop() bool {
	if s.o.DirectAllowed != nil && s.o.DirectAllowed() {
		return true
	}
	for _, p := range s.o.Registry.Peers() {
		if p.Type() == peers.Parent && p.Health().Eligible() {
			return true
		}
	}
	return false
}

// Stats are the listener's counters.
// Denied counts the queries refused; Silenced those of them dropped
// without an answer (past the bound of DENIED answers).
type Stats struct {
	Queries, Hits, Misses, MissNoFetch, Denied, Silenced, Malformed int64
}

// Stats reads the counters.
func (s *Server) Stats() Stats {
	return Stats{Queries: s.queries.Load(), Hits: s.hits.Load(), Misses: s.misses.Load(),
		MissNoFetch: s.nofetch.Load(), Denied: s.denied.Load(), Silenced: s.silenced.Load(), Malformed: s.malformed.Load()}
}
