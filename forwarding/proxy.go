// Package forwarding is peerd's forward proxy: its own HTTP/1.1 engine on
// the proxy port (client connections, keep-alive, pipelining, limits and
// timeouts), the cache as a layer in front of the forwarder, the one walk
// over a selection plan with one explicit attempt per hop (which owns its
// connection), the per-hop connection pools, CONNECT and Upgrade tunnels,
// error answers and the access log.
//
// An attempt's progress (dialling, connected, head written, body written,
// response head read, first byte sent to the client) is a plain field set
// where each step happens; one pure function, decide, turns the class of a
// failed attempt and the request's facts into "answer", "next hop" or "same
// hop on a fresh connection":
//
//	connect failure   no connection; counted against the peer by the
//	                  dialer; always retried on the next hop.
//	stale connection  a pooled connection the peer had closed: nothing
//	                  reached it; redone on a fresh connection, for free.
//	before write      a connection, but the head was not written whole:
//	                  nothing usable reached the hop; retried, free.
//	after write       written, no (whole) response: retried only when the
//	                  request is idempotent with a buffered body, within the
//	                  retry budget.
//	timeout           written, no response byte within read_timeout:
//	                  retriable exactly when 504 is (retry_on_status).
//	committed         a response byte reached the client: never redone.
package forwarding

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peerd/peerd/access"
	"github.com/peerd/peerd/auth"
	"github.com/peerd/peerd/cache"
	"github.com/peerd/peerd/dialer"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
	"github.com/sirupsen/logrus"
	"golang.org/x/time/rate"
)

// Planner builds next-hop plans; *selection.Planner is one.
type Planner interface {
	Plan(r selection.Request) selection.Plan
}

// Authenticator checks a request's Proxy-Authorization ([auth]);
// *auth.Basic is one.
type Authenticator interface {
	Check(header []byte, source string, now time.Time) (user string, v auth.Verdict)
	Realm() string
}

// SetAuth switches proxy authentication (nil: off), on start and reload.
func (p *Proxy) SetAuth(a Authenticator) {
	if a == nil {
		p.auth.Store(nil)
		return
	}
	p.auth.Store(&a)
}

// Accounting tracks in-flight requests per peer and hears of slow
// connects; *peers.Registry is one.
type Accounting interface {
	BeginRequest(p *peers.Peer, now time.Time) bool
	EndRequest(p *peers.Peer)
	MarkSlow(p *peers.Peer)
	// ObserveAnswer reports how a parent answered a request written to
	// it whole (contract section 16).
	ObserveAnswer(p *peers.Peer, class peers.AnswerClass, firstByte time.Duration, at time.Time)
	// FirstByte is p's first_byte_timeout in force (0: off) and whether a
	// late request to it is hedged.
	FirstByte(p *peers.Peer) (timeout time.Duration, hedge bool)
}

// PeerDialer connects to peers and reports outcomes; *dialer.Dialer is one.
type PeerDialer interface {
	DialPeer(ctx context.Context, p *peers.Peer, why dialer.Purpose) (net.Conn, error)
}

// ICP asks peers by ICP (RFC 2186) before a GET or HEAD is planned;
// *icp.Querier is one.
type ICP interface {
	Query(ctx context.Context, url []byte) (first *peers.Peer, code string, asked, timedOut bool)
}

// Options wire a Proxy.
type Options struct {
	Config     Config
	Planner    Planner
	Accounting Accounting
	Dialer     PeerDialer
	// DirectDial dials origins; nil means a net.Dialer.
	DirectDial func(ctx context.Context, network, addr string) (net.Conn, error)
	AccessLog  *AccessLog
	Metrics    *Metrics
	Log        logrus.FieldLogger
	Version    string
	// Policy is the destination policy ([access]); nil means the defaults
	// with no own addresses.
	Policy *access.Policy
	// Resolver resolves origin names for DIRECT; nil means
	// net.DefaultResolver.
	Resolver Resolver
	// ICP, when set, is asked before a GET or HEAD is planned.
	ICP ICP
	// Source, when set, is where [proxy] outgoing_address goes: the
	// local address of connections to origins (and to peers, through
	// the peer dialer that shares it).
	Source *dialer.Source
}

// Resolver looks up an origin's addresses.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Proxy is the forward proxy: Serve it on one or more listeners.
type Proxy struct {
	planner    Planner
	acct       Accounting
	dialer     PeerDialer
	directDial func(ctx context.Context, network, addr string) (net.Conn, error)
	source     *dialer.Source
	access     atomic.Pointer[AccessLog]
	port       atomic.Pointer[string] // the plain listener's, bound (X-Cache-Lookup)
	cache      atomic.Pointer[cache.Cache]
	policy     atomic.Pointer[access.Policy]
	auth       atomic.Pointer[Authenticator]
	rules      atomic.Pointer[[]Rule]
	resolver   Resolver
	icp        ICP
	metrics    *Metrics
	log        logrus.FieldLogger
	version    string

	cfg      atomic.Pointer[runtimeConfig]
	instance string // random per process, for loop detection under the default name
	budget   *retryBudget
	pools    *pools

	tunnels tunnelSet
	conns   connSet

	janitorOnce sync.Once
	stop        chan struct{} // closed by Shutdown
	// background are the revalidations running behind stale answers;
	// Shutdown waits for them as for requests in flight.
	background taskGroup

	// unsolicitedLog spaces the warnings about next hops that send bytes
	// nobody asked for: a hostile parent must not flood the log.
	unsolicitedLog rate.Sometimes
}

// unsolicited counts and logs n connections to hop closed because the
// hop sent bytes past its answer (a broken answer from that hop).
func (p *Proxy) unsolicited(hop selection.Hop, n int) {
	name := "DIRECT"
	if hop.Peer != nil {
		name = hop.Peer.Name()
	}
	if p.metrics != nil {
		p.metrics.unsolicited.WithLabelValues(name).Add(float64(n))
	}
	p.unsolicitedLog.Do(func() {
		p.log.WithField("peer", name).Warn("next hop sent bytes past the end of its answer; connection closed, not reused")
	})
}

// runtimeConfig is Config with its words parsed, swapped whole on reload.
type runtimeConfig struct {
	Config
	// named: the name was configured, not defaulted to the host name.
	named bool
	// tag ends this process's Via version under the default name.
	tag         []byte
	allow       []netip.Prefix
	retryStatus [600]bool
	via         string // "" when [proxy] via = false
	xff         xffMode
	// reqRemove is request_header_remove less Via and X-Forwarded-For,
	// which reqNoVia and xff carry.
	reqRemove []string
	reqNoVia  bool
	// xCache is the X-Cache and X-Cache-Lookup fields Squid adds to
	// every answer, by [served from the cache][found stored at lookup].
	xCache    [2][2]string
	maxHeader int
}

// New returns a proxy.
func New(o Options) (*Proxy, error) {
	p := &Proxy{
		planner: o.Planner, acct: o.Accounting, dialer: o.Dialer, directDial: o.DirectDial, source: o.Source,
		metrics: o.Metrics, log: o.Log, version: o.Version, resolver: o.Resolver, icp: o.ICP,
		budget:         newRetryBudget(o.Config.RetryBudget),
		pools:          newPools(),
		stop:           make(chan struct{}),
		unsolicitedLog: rate.Sometimes{Interval: 10 * time.Second},
		instance:       fmt.Sprintf("%08x", rand.Uint32()),
	}
	p.access.Store(o.AccessLog)
	if o.Policy == nil {
		pol, err := access.Compile(access.DefaultConfig(), nil)
		if err != nil {
			return nil, err
		}
		o.Policy = pol
	}
	p.policy.Store(o.Policy)
	if p.resolver == nil {
		p.resolver = net.DefaultResolver
	}
	if p.log == nil {
		p.log = logrus.StandardLogger()
	}
	if p.version == "" {
		p.version = "dev"
	}
	if p.metrics == nil {
		p.metrics = NewMetrics()
	}
	p.conns.init()
	if err := p.Update(o.Config); err != nil {
		return nil, err
	}
	return p, nil
}

// Update applies a new [proxy] config (on reload). Pooled connections stay:
// they are TCP connections to the same addresses, and everything a config
// changes about a request (credentials, timeouts, names) is applied per
// request.
func (p *Proxy) Update(c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	p.Apply(c)
	return nil
}

// Apply puts a [proxy] section in force that has passed Validate (a
// reload validates the whole file once, then applies: nothing here can
// fail, so no error is dropped).
func (p *Proxy) Apply(c Config) {
	rc := &runtimeConfig{Config: c, maxHeader: int(c.MaxHeaderSize)}
	for _, a := range c.Allow {
		rc.allow = append(rc.allow, netip.Prefix(a))
	}
	for _, s := range c.RetryOnStatus {
		rc.retryStatus[s] = true
	}
	rc.named = c.Name != ""
	rc.tag = []byte("+" + p.instance)
	if !rc.named {
		rc.Name = hostName()
	}
	if c.Via {
		rc.via = "1.1 " + rc.Name + " (peerd/" + p.viaVersion(rc.named) + ")"
	}
	rc.xff = xffModes[c.ForwardedFor]
	for _, name := range c.RequestHeaderRemove {
		switch {
		case strings.EqualFold(name, "Via"):
			rc.reqNoVia = true
		case strings.EqualFold(name, "X-Forwarded-For"):
			rc.xff = xffDelete
		default:
			rc.reqRemove = append(rc.reqRemove, name)
		}
	}
	port := ""
	if pp := p.port.Load(); pp != nil {
		port = *pp
	} else if _, lp, err := net.SplitHostPort(c.Listen); err == nil {
		port = lp
	}
	rc.xCache = xCacheFields(rc.Name, port)
	if p.source != nil {
		out, _ := netip.ParseAddr(c.OutgoingAddress) // validated; "" clears it
		p.source.Set(out)
	}
	p.cfg.Store(rc)
	p.budget.setRatio(c.RetryBudget)
}

func (p *Proxy) config() *runtimeConfig { return p.cfg.Load() }

// xCacheFields builds the X-Cache and X-Cache-Lookup fields as Squid
// writes them: "X-Cache: HIT from NAME" when the answer came from the
// cache, and "X-Cache-Lookup: HIT from NAME:PORT" when a stored response
// was found (a stale one revalidated is a lookup hit, and the answer a
// miss).
func xCacheFields(name, port string) (f [2][2]string) {
	at := name
	if port != "" {
		at += ":" + port
	}
	word := [2]string{"MISS", "HIT"}
	for served := range 2 {
		for found := range 2 {
			f[served][found] = "X-Cache: " + word[served] + " from " + name + "\r\nX-Cache-Lookup: " + word[found] + " from " + at + "\r\n"
		}
	}
	return f
}

// SetPort names the port clients reach the proxy on, its plain
// listener's as bound (a configured port 0 is a real one by then), as
// Squid names its first http_port in X-Cache-Lookup.
func (p *Proxy) SetPort(port string) {
	p.port.Store(&port)
	rc := *p.config() // not Apply again: its Name may be the defaulted one
	rc.xCache = xCacheFields(rc.Name, port)
	p.cfg.Store(&rc)
}

// Allowed reports whether the [proxy] allow ACL admits a client address
// (the ICP listener answers the same clients).
func (p *Proxy) Allowed(a netip.Addr) bool { return p.config().allowed(a) }

// Name is the proxy's name in force (Via, Cache-Status, Proxy-Status).
func (p *Proxy) Name() string { return p.config().Name }

// hostName is the default name: the machine's host name, as Squid's
// visible_hostname defaults to it.
func hostName() string {
	if h, err := os.Hostname(); err == nil && h != "" && !strings.ContainsAny(h, " \t,()") {
		return h
	}
	return "peerd"
}

// viaVersion is the version peerd writes in its Via comment. Under the
// default name it carries this process's instance tag as build metadata
// ("0.1.0+3f9a1c2e"): peerds on one host share the host name, and the tag
// is how one tells its own Via entry (a loop) from another's (a chain).
func (p *Proxy) viaVersion(named bool) string {
	if named {
		return p.version
	}
	return p.version + "+" + p.instance
}

// SetPolicy replaces the destination policy (on reload).
func (p *Proxy) SetPolicy(pol *access.Policy) { p.policy.Store(pol) }

// SetAccessLog switches the access log (nil: off).
func (p *Proxy) SetAccessLog(a *AccessLog) { p.access.Store(a) }

// Prune drops the pools of peers no longer configured.
func (p *Proxy) Prune(current []*peers.Peer) {
	keep := make(map[*peers.Peer]bool, len(current))
	for _, c := range current {
		keep[c] = true
	}
	p.pools.expire(time.Now(), p.config().PconnTimeout, keep)
}

// CloseIdle closes every idle pooled connection.
func (p *Proxy) CloseIdle() { p.pools.expire(time.Now(), 0, nil) }

// janitor closes pooled connections idle past pconn_timeout, so an idle
// hop is not held open forever.
func (p *Proxy) janitor() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			p.pools.expire(now, p.config().PconnTimeout, nil)
		}
	}
}

// Serve accepts client connections on ln until ln is closed or Shutdown
// is called. Several listeners may be served at once (a listener moved by
// a reload keeps its connections while the new one accepts).
func (p *Proxy) Serve(ln net.Listener) error {
	p.janitorOnce.Do(func() { go p.janitor() })
	if !p.conns.addListener(ln) {
		ln.Close()
		return nil
	}
	defer p.conns.removeListener(ln)
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || p.conns.closing() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, errTooManyFiles) {
				// Out of file descriptors or similar: wait, as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				p.log.WithError(err).Warn("proxy accept failed; retrying")
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		p.accept(nc)
	}
}

// maxRefusing bounds the connections from sources outside [proxy] allow
// that are being answered 403 at once; past it they are closed unanswered.
const maxRefusing = 64

// accept admits a new client connection. A source outside [proxy] allow
// is refused before it is counted against max_connections or the per
// source cap: it gets its 403 from a small bounded set of goroutines, or
// a close when those are busy, so refused addresses can never use up the
// slots of allowed clients.
func (p *Proxy) accept(nc net.Conn) {
	c := p.config()
	remote, ok := remoteAddr(nc)
	if !ok || !c.allowed(remote) {
		if p.conns.refusing.Add(1) > maxRefusing {
			p.conns.refusing.Add(-1)
			p.metrics.connRefused()
			nc.Close()
			return
		}
		cc := newClientConn(p, nc)
		cc.refusal = true
		go cc.serve()
		return
	}
	if !p.conns.admit(c.MaxConnections) {
		p.metrics.connRefused()
		nc.Close()
		return
	}
	if !p.conns.admitSource(remote, c.MaxConnectionsPerSource) {
		p.conns.release()
		p.metrics.connRefused()
		nc.Close()
		return
	}
	cc := newClientConn(p, nc)
	cc.counted = true
	go cc.serve()
}

// remoteAddr is a connection's client address.
func remoteAddr(nc net.Conn) (netip.Addr, bool) {
	if ta, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		a, ok := netip.AddrFromSlice(ta.IP)
		return a.Unmap(), ok
	}
	ap, err := netip.ParseAddrPort(nc.RemoteAddr().String())
	return ap.Addr().Unmap(), err == nil
}

// Shutdown stops accepting, closes idle client connections, and waits for
// requests in flight to finish; when ctx ends first it closes the rest.
// Tunnels are waited for by WaitTunnels.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.conns.beginClose(p.config().ShutdownIdleGrace)
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	bg := p.background.close()
	for {
		if p.conns.closeIdle(time.Now()) == 0 {
			select {
			case <-bg:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				continue
			}
		}
		select {
		case <-ctx.Done():
			p.conns.closeAll()
			return ctx.Err()
		case <-t.C:
		}
	}
}
