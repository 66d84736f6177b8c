package forwarding

// This file holds connecting to a next hop: the hedge delay, parents
// through the dialer, DIRECT origins with resolution and the destination
// policy.

import (
	"context"
	"crypto/tls"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/peerd/peerd/dialer"
	"github.com/peerd/peerd/selection"
)

// The dial step. A request that may be retried takes the hop's idle
// connection when there is one; anything else gets a new connection. When
// a connect is still pending after its hedge delay, the next hop of the
// plan is started in parallel (and the one after that, every hedge delay),
// and the first connection to arrive carries the request. Nothing is
// written before a connection is won, so a request is never sent twice; a
// connection that arrives after the race is over goes to its hop's idle
// list, unused. Each hop is dialled at most once per request, so when every
// hop of the plan fails the client has its answer within about one connect
// timeout of its arrival, not one per hop.

// hedgeDelay is how long a connect to hop may pend before the next hop is
// started in parallel; 0 turns hedging off. "auto" is max(50ms, 4 x the
// peer's smoothed connect time), never above its connect timeout; DIRECT
// is hedged only with an explicit delay.
func (p *Proxy) hedgeDelay(c *runtimeConfig, hop selection.Hop) time.Duration {
	if !c.ConnectHedgeDelay.Auto {
		return c.ConnectHedgeDelay.Delay
	}
	if hop.Peer == nil {
		return 0
	}
	d := max(50*time.Millisecond, 4*hop.Peer.ConnectTime())
	return min(d, hop.Peer.ConnectTimeout())
}

// dialHop opens a new connection to hop: a peer through the instrumented
// dialer (which reports the outcome to the registry), an origin directly.
func (p *Proxy) dialHop(hop selection.Hop, o origin) (net.Conn, error) {
	if hop.Peer != nil {
		return p.dialer.DialPeer(context.Background(), hop.Peer, dialer.Traffic)
	}
	return p.dialOrigin(o)
}

// origin is where DIRECT goes for one request.
type origin struct {
	host string // name or literal address, for resolution and TLS
	port uint16
	tls  bool
}

// dialOrigin connects to an origin within connect_timeout, with TLS for
// https URLs. The name is resolved here, and every address is put to the
// destination policy before anything is dialled: a name that resolves to
// the proxy host itself is refused (*access.Denied), whatever else it
// resolves to.
func (p *Proxy) dialOrigin(o origin) (net.Conn, error) {
	c := p.config()
	pol := p.policy.Load()
	ctx, cancel := context.WithTimeout(context.Background(), c.ConnectTimeout)
	defer cancel()
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(o.host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		if addrs, err = p.resolver.LookupNetIP(ctx, "ip", o.host); err != nil {
			return nil, err
		}
		if len(addrs) == 0 {
			return nil, &net.DNSError{Err: "no addresses", Name: o.host, IsNotFound: true}
		}
	}
	if pol.DialChecks() {
		for _, a := range addrs {
			if err := pol.CheckDial(netip.AddrPortFrom(a, o.port)); err != nil {
				return nil, err
			}
		}
	}
	var conn net.Conn
	var err error
	for _, a := range addrs {
		addr := netip.AddrPortFrom(a, o.port).String()
		if p.directDial != nil {
			conn, err = p.directDial(ctx, "tcp", addr)
		} else {
			d := p.source.For(a)
			conn, err = d.DialContext(ctx, "tcp", addr)
		}
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil || !o.tls {
		return conn, err
	}
	tc := dialer.TLSClient(conn, &tls.Config{ServerName: o.host})
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return tc, nil
}

// dialResult is one finished connect of a race.
type dialResult struct {
	hop  selection.Hop
	conn net.Conn
	err  error
	pool *pool // where the connection goes if it loses
}

// race is one request's set of parallel connects.
type race struct {
	p       *Proxy
	results chan dialResult
	mu      sync.Mutex // guards over
	over    bool       // a connection was taken, or the request gave up
}

// maxRacing bounds the connects one request has pending at once.
const maxRacing = 8

func (r *race) dial(hop selection.Hop, o origin, pl *pool) {
	conn, err := r.p.dialHop(hop, o)
	res := dialResult{hop: hop, conn: conn, err: err, pool: pl}
	r.mu.Lock()
	if !r.over {
		r.results <- res // never blocks: at most maxRacing are pending
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	r.late(res)
}

// late disposes of a connect that finished after the race: a connection
// goes to its hop's idle list (it carried nothing), and the hop's
// in-flight slot is released.
func (r *race) late(res dialResult) {
	if res.conn != nil {
		res.pool.put(newUpConn(res.conn, res.pool), time.Now())
	}
	if res.hop.Peer != nil {
		r.p.acct.EndRequest(res.hop.Peer)
	}
}

// finish ends the race: connects still pending clean up after themselves,
// and those already finished are disposed of here.
func (r *race) finish() {
	r.mu.Lock()
	r.over = true
	r.mu.Unlock()
	for {
		select {
		case res := <-r.results:
			r.late(res)
		default:
			return
		}
	}
}
