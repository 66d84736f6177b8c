// Package dialer opens TCP connections to peers and reports every outcome to
// the registry, so that each path that connects to a peer — client requests,
// CONNECT tunnels and probes — counts the same way. Classification happens
// here, where the cause is known: a connect that failed is a connect failure;
// a caller that gave up (its context ended) is not the peer's fault.
package dialer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/peerd/peerd/internal/stall"
	"github.com/peerd/peerd/peers"
	"github.com/sirupsen/logrus"
)

// Reporter receives connect outcomes; *peers.Registry is one.
type Reporter interface {
	Observe(p *peers.Peer, o peers.Outcome)
}

// Resolver looks up a peer's host name.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer connects to peers. The zero value is not usable; set Reporter.
type Dialer struct {
	Reporter Reporter
	// Dial opens a connection; nil means a net.Dialer. Tests inject
	// net.Pipe ends here.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Resolver resolves peer host names; nil means net.DefaultResolver.
	Resolver Resolver
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log gets DNS fallback warnings; nil means the standard logger.
	Log logrus.FieldLogger
	// TLS returns the TLS client config of a peer that speaks TLS, nil
	// for one that does not (or nil: no TLS at all). The handshake is
	// part of the connect: within the connect timeout, and a failed one
	// is a connect failure (class tls).
	TLS func(p *peers.Peer) *tls.Config
	// Source is the local address connections are made from; nil: the
	// kernel's choice.
	Source *Source
	// Stalls, when set, is peerd's stall guard: a connect's timeout
	// stretches by peerd's own stalls within it, so a peer is blamed for a
	// timeout only when it had all of it.
	Stalls *stall.Guard

	mu    sync.Mutex
	known map[string][]netip.Addr // last good resolution per host
}

// Purpose says why a connection is opened.
type Purpose bool

const (
	Traffic Purpose = false
	Probe   Purpose = true
)

// ConnectError is a failed connect to a peer: it was reported to the
// registry as a connect failure, and nothing was sent.
type ConnectError struct {
	Peer string
	Err  error
}

func (e *ConnectError) Error() string { return fmt.Sprintf("connect to %s: %v", e.Peer, e.Err) }
func (e *ConnectError) Unwrap() error { return e.Err }

// TimeoutError is a connect that did not complete within the peer's
// connect (or probe) timeout: SYNs dropped, a vanished host.
type TimeoutError struct {
	After time.Duration
	Err   error
}

func (e *TimeoutError) Error() string { return fmt.Sprintf("connect timeout after %s", e.After) }
func (e *TimeoutError) Unwrap() error { return e.Err }

// Timeout reports true: it is a net.Error timeout.
func (e *TimeoutError) Timeout() bool { return true }

// Temporary is part of net.Error.
func (e *TimeoutError) Temporary() bool { return true }

// remoteIP is the address a connection reached (zero for a pipe).
func remoteIP(c net.Conn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		if a, ok := netip.AddrFromSlice(ta.IP); ok {
			return a.Unmap()
		}
	}
	return netip.Addr{}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (d *Dialer) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

func (d *Dialer) logger() logrus.FieldLogger {
	if d.Log != nil {
		return d.Log
	}
	return logrus.StandardLogger()
}

// DialPeer connects to p within timeout and reports the outcome; a
// timeout of 0 is the peer's own in force now (its probe timeout for a
// probe). A request passes the connect timeout of the config generation
// it runs under. Nothing is written to the connection. If ctx ends first,
// the attempt is not reported: the caller went away.
func (d *Dialer) DialPeer(ctx context.Context, p *peers.Peer, why Purpose, timeout time.Duration) (net.Conn, error) {
	if timeout <= 0 {
		timeout = p.ConnectTimeout()
		if why == Probe {
			timeout = p.ProbeTimeout()
		}
	}
	start := d.now()
	// The timeout stretches by peerd's own stalls (stall_guard): a peer
	// is blamed for a timeout only when it had all of it.
	dctx, cancel := d.Stalls.WithTimeout(ctx, timeout)
	conn, err := d.dial(dctx, p)
	if err == nil {
		conn, err = d.handshake(dctx, p, conn)
	}
	expired := errors.Is(context.Cause(dctx), context.DeadlineExceeded)
	cancel()
	if err != nil && ctx.Err() != nil {
		// The caller gave up; the peer did nothing wrong.
		return nil, ctx.Err()
	}
	end := d.now()
	if err != nil && (errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)) {
		// peerd is out of file descriptors: its own limit, not the
		// peer's failure (the caller counts and reports it).
		return nil, &ConnectError{Peer: p.Name(), Err: err}
	}
	if err != nil {
		if expired || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			// Kept a timeout (not plain text), so that every reader —
			// failures_by_class, Proxy-Status, the access log — calls a
			// black-holed peer what it is.
			err = &TimeoutError{After: timeout, Err: err}
		}
		d.Reporter.Observe(p, peers.Outcome{At: end, Err: err, Probe: bool(why)})
		return nil, &ConnectError{Peer: p.Name(), Err: err}
	}
	d.Reporter.Observe(p, peers.Outcome{At: end, RTT: end.Sub(start), Probe: bool(why), Addr: remoteIP(conn)})
	return conn, nil
}

// handshake speaks TLS on conn when p wants it; conn is closed when the
// handshake fails.
func (d *Dialer) handshake(ctx context.Context, p *peers.Peer, conn net.Conn) (net.Conn, error) {
	if d.TLS == nil || !p.TLS() {
		return conn, nil
	}
	cfg := d.TLS(p)
	if cfg == nil {
		conn.Close()
		return nil, fmt.Errorf("tls: no TLS configuration for peer %s", p.Name())
	}
	tc := TLSClient(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		if ctx.Err() != nil {
			return nil, err // the connect timeout ran out: a timeout
		}
		return nil, &TLSError{Err: err}
	}
	return tc, nil
}

// TLSError is a TLS handshake with a peer that failed (verification, a
// protocol error, an alert): a connect failure of class tls.
type TLSError struct{ Err error }

func (e *TLSError) Error() string { return "tls handshake: " + e.Err.Error() }
func (e *TLSError) Unwrap() error { return e.Err }

// TLSFailure marks the error for peers.Classify.
func (e *TLSError) TLSFailure() bool { return true }

func (d *Dialer) dial(ctx context.Context, p *peers.Peer) (net.Conn, error) {
	addrs, err := d.resolve(ctx, p)
	if err != nil {
		return nil, err
	}
	port := uint16(p.Port())
	var firstErr error
	for _, a := range addrs {
		conn, err := d.dialAddr(ctx, netip.AddrPortFrom(a, port))
		if err == nil {
			return conn, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, firstErr
}

func (d *Dialer) dialAddr(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	if d.Dial != nil {
		return d.Dial(ctx, "tcp", addr.String())
	}
	nd := d.Source.For(addr.Addr())
	return nd.DialContext(ctx, "tcp", addr.String())
}

// resolve returns p's addresses. When a look-up fails but an earlier one
// succeeded, the earlier addresses are used (and a warning logged): a DNS
// outage is not a peer outage.
func (d *Dialer) resolve(ctx context.Context, p *peers.Peer) ([]netip.Addr, error) {
	host := p.Host()
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	var r Resolver = net.DefaultResolver
	if d.Resolver != nil {
		r = d.Resolver
	}
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err == nil && len(addrs) == 0 {
		err = fmt.Errorf("lookup %s: no addresses", host)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			if old := d.known[host]; len(old) > 0 {
				d.logger().WithFields(logrus.Fields{"peer": p.Name(), "err": err.Error()}).
					Warn("DNS lookup of peer failed; using its last known address")
				return old, nil
			}
		}
		return nil, fmt.Errorf("dns: %w", err)
	}
	if d.known == nil {
		d.known = make(map[string][]netip.Addr)
	}
	d.known[host] = addrs
	return addrs, nil
}
