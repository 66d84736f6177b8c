package forwarding

// This file holds connecting to a next hop: the hedge delay, parents
// through the dialer, DIRECT origins with resolution and the destination
// policy (race.go races connects).

import (
	"context"
	"crypto/tls"
	"net"
	"net/netip"
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
func (h *hops) hedgeDelay(g *generation, hop selection.Hop) time.Duration {
	if c := g.cfg; !c.ConnectHedgeDelay.Auto {
		return c.ConnectHedgeDelay.Delay
	}
	if hop.Peer == nil {
		return 0
	}
	d := max(50*time.Millisecond, 4*hop.Peer.Health().ConnectTime())
	return min(d, h.health.ConnectTimeout(hop.Peer))
}

// dialHop opens a new connection to hop: a peer through the instrumented
// dialer (which reports the outcome to the registry), an origin directly
// under generation g's timeout and policy. A peer's connect was claimed
// by the walker's take (Peer.BeginDial); it ends here.
func (h *hops) dialHop(hop selection.Hop, o origin, g *generation) (net.Conn, error) {
	if hop.Peer != nil {
		defer hop.Peer.Health().EndDial()
		// Within the connect timeout of the request's generation.
		return h.dialer.DialPeer(context.Background(), hop.Peer, dialer.Traffic, h.health.ConnectTimeout(hop.Peer))
	}
	return h.origins.dialOrigin(o, g)
}

// dialOrigin connects to an origin within connect_timeout, with TLS for
// https URLs. The name is resolved here, and every address is put to the
// destination policy before anything is dialled: a name that resolves to
// the proxy host itself is refused (*access.Denied), whatever else it
// resolves to.
func (d *originDialer) dialOrigin(o origin, g *generation) (net.Conn, error) {
	c := g.cfg
	pol := g.policy
	ctx, cancel := context.WithTimeout(context.Background(), c.ConnectTimeout)
	defer cancel()
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(o.host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		if addrs, err = d.resolver.LookupNetIP(ctx, "ip", o.host); err != nil {
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
		if d.dial != nil {
			conn, err = d.dial(ctx, "tcp", addr)
		} else {
			nd := d.source.For(a)
			conn, err = nd.DialContext(ctx, "tcp", addr)
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

// origin is where DIRECT goes for one request.
type origin struct {
	host string // name or literal address, for resolution and TLS
	port uint16
	tls  bool
}
