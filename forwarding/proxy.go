// Package forwarding is peerd's HTTP forward proxy: the client-facing
// handler (ACL, request checks, CONNECT tunnels, error pages, access log)
// and the forwarder that walks a selection plan, classifies every failure
// once where it happens and retries only when that is safe.
//
// The failure classes, decided from facts and never from error strings:
//
//	connect failure   the TCP connect to the hop failed. Reported to the
//	                  registry by the dialer; always retried on the next hop.
//	before write      a connection was had but the request headers were not
//	                  written. Nothing reached the hop: retried, free.
//	after write       the request was written, no response byte came back.
//	                  Retried only for idempotent requests whose body was
//	                  buffered, within the retry budget.
//	after response    a response byte reached the client: never retried; the
//	                  client connection is cut so it sees a truncated answer,
//	                  never a spliced one.
package forwarding

import (
	"context"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peerd/peerd/dialer"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
	"github.com/sirupsen/logrus"
)

// Planner builds next-hop plans; *selection.Planner is one.
type Planner interface {
	Plan(r selection.Request) selection.Plan
}

// Accounting tracks in-flight requests per peer and hears of slow
// connects; *peers.Registry is one.
type Accounting interface {
	BeginRequest(p *peers.Peer) bool
	EndRequest(p *peers.Peer)
	MarkSlow(p *peers.Peer)
}

// PeerDialer connects to peers and reports outcomes; *dialer.Dialer is one.
type PeerDialer interface {
	DialPeer(ctx context.Context, p *peers.Peer, why dialer.Purpose) (net.Conn, error)
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
}

// Proxy is the forward proxy. It is an http.Handler.
type Proxy struct {
	planner    Planner
	acct       Accounting
	dialer     PeerDialer
	directDial func(ctx context.Context, network, addr string) (net.Conn, error)
	access     atomic.Pointer[AccessLog]
	metrics    *Metrics
	log        logrus.FieldLogger
	version    string

	cfg    atomic.Pointer[runtimeConfig]
	rp     *httputil.ReverseProxy
	budget *retryBudget

	mu         sync.Mutex // guards transports
	transports map[*peers.Peer]*hopTransports
	direct     *hopTransports

	tunnels tunnelSet
}

// runtimeConfig is Config with its words parsed, swapped whole on reload.
type runtimeConfig struct {
	Config
	allow       []netip.Prefix
	retryStatus map[int]bool
	via         string
}

// hopTransports are the connection pools to one next hop: reuse for
// requests that may be retried if a pooled connection turns out stale, and
// fresh for those that may not (Squid's rule: a non-retriable request never
// goes over a connection that sat idle).
type hopTransports struct {
	reuse, fresh *http.Transport
}

// New returns a proxy.
func New(o Options) (*Proxy, error) {
	p := &Proxy{
		planner: o.Planner, acct: o.Accounting, dialer: o.Dialer, directDial: o.DirectDial,
		metrics: o.Metrics, log: o.Log, version: o.Version,
		transports: make(map[*peers.Peer]*hopTransports),
		budget:     newRetryBudget(o.Config.RetryBudget),
	}
	p.access.Store(o.AccessLog)
	if p.log == nil {
		p.log = logrus.StandardLogger()
	}
	if p.version == "" {
		p.version = "dev"
	}
	if p.metrics == nil {
		p.metrics = NewMetrics()
	}
	if err := p.Update(o.Config); err != nil {
		return nil, err
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		Transport:      roundTripper{p},
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.errorHandler,
		ErrorLog:       DebugLogger(p.log.WithField("component", "forwarding")),
		BufferPool:     bufferPool{},
	}
	return p, nil
}

// Update applies a new [proxy] config (on reload). Pools are rebuilt lazily
// with the new timeouts.
func (p *Proxy) Update(c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	allow, _ := ParseAllow(c.Allow)
	rc := &runtimeConfig{Config: c, allow: allow, retryStatus: make(map[int]bool)}
	for _, s := range c.RetryOnStatus {
		rc.retryStatus[s] = true
	}
	rc.via = "1.1 " + c.Name + " (peerd/" + p.version + ")"
	old := p.cfg.Swap(rc)
	p.budget.setRatio(c.RetryBudget)
	if old != nil && (old.PconnTimeout != c.PconnTimeout || old.ReadTimeout != c.ReadTimeout || old.ConnectTimeout != c.ConnectTimeout) {
		p.mu.Lock()
		for k, t := range p.transports {
			t.closeIdle()
			delete(p.transports, k)
		}
		if p.direct != nil {
			p.direct.closeIdle()
			p.direct = nil
		}
		p.mu.Unlock()
	}
	return nil
}

// SetAccessLog switches the access log (nil: off).
func (p *Proxy) SetAccessLog(a *AccessLog) { p.access.Store(a) }

// Prune drops the pools of peers no longer configured.
func (p *Proxy) Prune(current []*peers.Peer) {
	keep := make(map[*peers.Peer]bool, len(current))
	for _, c := range current {
		keep[c] = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, t := range p.transports {
		if !keep[k] {
			t.closeIdle()
			delete(p.transports, k)
		}
	}
}

// CloseIdle closes every idle pooled connection.
func (p *Proxy) CloseIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range p.transports {
		t.closeIdle()
	}
	if p.direct != nil {
		p.direct.closeIdle()
	}
}

func (t *hopTransports) closeIdle() {
	t.reuse.CloseIdleConnections()
	t.fresh.CloseIdleConnections()
}

func (p *Proxy) config() *runtimeConfig { return p.cfg.Load() }

// transportsFor returns the pools for a hop (nil peer: DIRECT).
func (p *Proxy) transportsFor(peer *peers.Peer) *hopTransports {
	p.mu.Lock()
	defer p.mu.Unlock()
	if peer == nil {
		if p.direct == nil {
			p.direct = p.newHopTransports(nil)
		}
		return p.direct
	}
	t := p.transports[peer]
	if t == nil {
		t = p.newHopTransports(peer)
		p.transports[peer] = t
	}
	return t
}

func (p *Proxy) newHopTransports(peer *peers.Peer) *hopTransports {
	c := p.config()
	var proxyURL *url.URL
	dial := p.hopDial(p.dialOrigin)
	if peer != nil {
		proxyURL = &url.URL{Scheme: "http", Host: peer.Addr()}
		if login := peer.Login(); login != "" {
			user, pass, _ := strings.Cut(login, ":")
			proxyURL.User = url.UserPassword(user, pass)
		}
		dial = p.hopDial(func(ctx context.Context, _, _ string) (net.Conn, error) {
			return p.dialer.DialPeer(ctx, peer, dialer.Traffic)
		})
	}
	mk := func(reuse bool) *http.Transport {
		t := &http.Transport{
			DialContext:           dial,
			MaxIdleConnsPerHost:   256,
			IdleConnTimeout:       c.PconnTimeout,
			ResponseHeaderTimeout: c.ReadTimeout,
			ExpectContinueTimeout: time.Second,
			TLSHandshakeTimeout:   c.ConnectTimeout,
			DisableCompression:    true,
			DisableKeepAlives:     !reuse,
		}
		if proxyURL != nil {
			t.Proxy = http.ProxyURL(proxyURL)
		}
		return t
	}
	return &hopTransports{reuse: mk(true), fresh: mk(false)}
}

// hopDial wraps a dial to a next hop: a failure is recorded on the attempt
// as a connect failure (the fact classification reads), a success becomes
// a hopConn.
func (p *Proxy) hopDial(raw func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := raw(ctx, network, addr)
		if err != nil {
			if a := attemptFrom(ctx); a != nil {
				a.connectErr.Store(true)
			}
			return nil, err
		}
		return &hopConn{Conn: conn, timeout: p.config().ReadTimeout}, nil
	}
}

// dialOrigin connects DIRECT within connect_timeout.
func (p *Proxy) dialOrigin(ctx context.Context, network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.config().ConnectTimeout)
	defer cancel()
	if p.directDial != nil {
		return p.directDial(ctx, network, addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// hopConn is a connection to a next hop. Reads that wait longer than
// read_timeout fail. Writes are gated by the attempt that holds the
// connection: an attempt that lost a hedged-connect race writes nothing,
// so a request is never sent twice.
type hopConn struct {
	net.Conn
	timeout time.Duration
	owner   atomic.Pointer[attempt]
}

func (c *hopConn) Read(b []byte) (int, error) {
	c.Conn.SetReadDeadline(time.Now().Add(c.timeout))
	return c.Conn.Read(b)
}

func (c *hopConn) Write(b []byte) (int, error) {
	if a := c.owner.Load(); a != nil && a.lost.Load() {
		c.Conn.Close()
		return 0, errHedgeLost
	}
	return c.Conn.Write(b)
}

// ServeHTTP handles one client request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := p.config()
	ex := &exchange{start: time.Now(), method: r.Method, url: r.RequestURI}
	// The client address is parsed once: for the ACL, X-Forwarded-For,
	// sourcehash and the access log.
	client, parsed := clientAddr(r.RemoteAddr)
	ex.client = client.String()
	cw := &countingWriter{ResponseWriter: w}
	defer p.finish(ex, cw)

	if !parsed || !c.allowed(client) {
		ex.fail(cw, errorf(http.StatusForbidden, CodeAccessDenied, "", "client %s is not in [proxy] allow", ex.client))
		return
	}
	if r.Method == http.MethodConnect {
		p.serveConnect(cw, r, ex)
		return
	}
	if e := p.check(c, r); e != nil {
		ex.fail(cw, e)
		return
	}
	if ambiguousFraming(r) {
		e := errorf(http.StatusBadRequest, CodeBadRequest, "", "request has both Content-Length and Transfer-Encoding (ambiguous framing)")
		e.Close = true
		ex.fail(cw, e)
		return
	}
	if done := p.maxForwards(cw, r, ex); done {
		return
	}
	r = r.WithContext(withExchange(r.Context(), ex))
	p.rp.ServeHTTP(cw, r)
}

// clientAddr parses a RemoteAddr; ok is false when it is not ip:port.
func clientAddr(remote string) (a netip.Addr, ok bool) {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}

// allowed reports whether the [proxy] allow ACL admits a.
func (c *runtimeConfig) allowed(a netip.Addr) bool {
	for _, pr := range c.allow {
		if pr.Contains(a) {
			return true
		}
	}
	return false
}

// loopError is the 508 for a request whose Via already names us, or nil.
func (c *runtimeConfig) loopError(h http.Header) *Error {
	if !looped(h, c.Name) {
		return nil
	}
	return errorf(http.StatusLoopDetected, CodeLoopDetected, "", "Via already names %q: %s", c.Name, strings.Join(h.Values("Via"), ", "))
}

// check validates a non-CONNECT request.
func (p *Proxy) check(c *runtimeConfig, r *http.Request) *Error {
	if !r.URL.IsAbs() || r.URL.Host == "" {
		return errorf(http.StatusBadRequest, CodeBadRequest, "",
			"%s %s: peerd is a forward proxy; send an absolute URI (GET http://host/path) or CONNECT host:port", r.Method, r.RequestURI)
	}
	if r.URL.Scheme != "http" && r.URL.Scheme != "https" {
		return errorf(http.StatusBadRequest, CodeBadRequest, "", "unsupported URL scheme %q", r.URL.Scheme)
	}
	return c.loopError(r.Header)
}

// maxForwards honours Max-Forwards on TRACE and OPTIONS (RFC 9110 7.6.2):
// at zero peerd answers itself; otherwise the value is decremented.
func (p *Proxy) maxForwards(w http.ResponseWriter, r *http.Request, ex *exchange) bool {
	if r.Method != http.MethodTrace && r.Method != http.MethodOptions {
		return false
	}
	v := r.Header.Get("Max-Forwards")
	if v == "" {
		return false
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		ex.fail(w, errorf(http.StatusBadRequest, CodeBadRequest, "", "bad Max-Forwards %q", v))
		return true
	}
	if n > 0 {
		r.Header.Set("Max-Forwards", strconv.Itoa(n-1))
		return false
	}
	ex.status = http.StatusOK
	if r.Method == http.MethodOptions {
		w.Header().Set("Allow", "GET, HEAD, POST, PUT, DELETE, OPTIONS, TRACE, CONNECT, PATCH")
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
		return true
	}
	w.Header().Set("Content-Type", "message/http")
	w.WriteHeader(http.StatusOK)
	r.Header.Del("Proxy-Authorization")
	r.Write(w)
	return true
}

// rewrite prepares the outgoing request. ReverseProxy has already removed
// hop-by-hop headers (Connection and what it names, Keep-Alive,
// Proxy-Connection, Proxy-Authorization, TE, Trailer, Transfer-Encoding,
// Upgrade) and X-Forwarded-*.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	c := p.config()
	ex := exchangeFrom(pr.In.Context())
	out := pr.Out
	out.URL = pr.In.URL
	out.Host = pr.In.Host
	if prior := pr.In.Header.Values("X-Forwarded-For"); len(prior) > 0 {
		out.Header.Set("X-Forwarded-For", strings.Join(prior, ", ")+", "+ex.client)
	} else {
		out.Header.Set("X-Forwarded-For", ex.client)
	}
	appendVia(out.Header, c.via)
}

func (p *Proxy) modifyResponse(resp *http.Response) error {
	appendVia(resp.Header, p.config().via)
	return nil
}

func (p *Proxy) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	ex := exchangeFrom(r.Context())
	if r.Context().Err() != nil {
		ex.clientGone = true
		return // the client went away; there is no one to answer
	}
	ex.fail(w, asError(err))
}

// finish writes the access log line and metrics of one exchange.
func (p *Proxy) finish(ex *exchange, cw *countingWriter) {
	if ex.status == 0 {
		ex.status = cw.status
	}
	elapsed := time.Since(ex.start)
	hier := ex.hierarchy()
	p.metrics.observeRequest(ex.status, hier, elapsed)
	if al := p.access.Load(); al != nil {
		al.Log(ex.entry(elapsed, cw.bytes, cw.Header().Get("Content-Type")))
	}
}

// DebugLogger adapts l to a *log.Logger writing at debug level, for
// net/http's ErrorLog fields (logrus's WriterLevel needs a goroutine and a
// pipe; this needs neither).
func DebugLogger(l logrus.FieldLogger) *log.Logger { return log.New(debugWriter{l}, "", 0) }

type debugWriter struct{ l logrus.FieldLogger }

func (w debugWriter) Write(b []byte) (int, error) {
	w.l.Debug(strings.TrimSpace(string(b)))
	return len(b), nil
}

// bufferPool recycles ReverseProxy's copy buffers.
type bufferPool struct{}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *copyBuffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { copyBuffers.Put(&b) }
