package forwarding

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
)

// exchange is the per-request record shared by the handler, the forwarder
// and the access log.
type exchange struct {
	start       time.Time
	client      string
	method      string
	url         string
	hop         selection.Hop
	hopped      bool // hop is set: a next hop answered
	status      int
	code        string // X-Peerd-Error, when peerd answered itself
	tunnel      bool
	clientGone  bool
	tunnelBytes int64
}

func (ex *exchange) fail(w http.ResponseWriter, e *Error) {
	ex.status, ex.code = e.Status, e.Code
	writeError(w, e)
}

func (ex *exchange) hierarchy() string {
	if !ex.hopped {
		return "HIER_NONE"
	}
	return ex.hop.Code
}

type exchangeKey struct{}

func withExchange(ctx context.Context, ex *exchange) context.Context {
	return context.WithValue(ctx, exchangeKey{}, ex)
}

func exchangeFrom(ctx context.Context) *exchange {
	if ex, ok := ctx.Value(exchangeKey{}).(*exchange); ok {
		return ex
	}
	return &exchange{}
}

// attempt records the facts of one try at one hop, set by the dialer and by
// httptrace hooks; classification reads only these facts.
type attempt struct {
	hop          selection.Hop
	ctx          context.Context // the attempt's request context
	cancel       context.CancelFunc
	arbiter      *arbiter    // non-nil while racing a hedged connect
	lost         atomic.Bool // lost the race: must write nothing
	connectErr   atomic.Bool // the dial to the hop failed
	wroteHeaders atomic.Bool
}

type attemptKey struct{}

func attemptFrom(ctx context.Context) *attempt {
	a, _ := ctx.Value(attemptKey{}).(*attempt)
	return a
}

func (a *attempt) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			// Called before anything is written: the one point where a
			// hedged race is decided.
			if hc, ok := i.Conn.(*hopConn); ok {
				hc.owner.Store(a)
			}
			if a.arbiter != nil && !a.arbiter.claim(a) {
				a.lost.Store(true)
			}
		},
		WroteHeaders: func() { a.wroteHeaders.Store(true) },
	}
}

// failure classes of one attempt.
type failure int

const (
	connectFailed failure = iota // nothing sent; counted against the peer
	beforeWrite                  // connection had, request not written
	afterWrite                   // written, no response
	timedOut                     // written, no response within read_timeout
)

var failureReasons = [...]string{"connect_failed", "before_write", "after_write", "timeout"}

func classify(a *attempt, err error) failure {
	switch {
	case a.connectErr.Load():
		return connectFailed
	case !a.wroteHeaders.Load():
		return beforeWrite
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return timedOut
	}
	return afterWrite
}

// roundTripper is the forwarder behind ReverseProxy: it walks the plan. It
// is the seam where a cache layer will sit later.
type roundTripper struct{ p *Proxy }

func (rt roundTripper) RoundTrip(out *http.Request) (*http.Response, error) {
	return rt.p.forward(out)
}

// body holds a request body prepared for possible replay.
type body struct {
	buf        []byte
	rest       io.ReadCloser // unbuffered remainder; nil when fully buffered
	replayable bool
}

// prepareBody buffers up to max bytes of the request body. A body that fits
// is replayable; a longer one streams (buffered prefix, then the rest) and
// makes the request non-retriable after it was written.
func prepareBody(r *http.Request, max int64) (*body, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return &body{replayable: true}, nil
	}
	if r.ContentLength > max {
		return &body{rest: r.Body}, nil
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(buf)) <= max {
		r.Body.Close()
		return &body{buf: buf, replayable: true}, nil
	}
	return &body{buf: buf, rest: r.Body}, nil
}

// install sets out's body for one attempt. A streaming body can be sent
// only once.
func (b *body) install(out *http.Request) {
	switch {
	case b.rest != nil:
		out.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b.buf), b.rest))
	case b.buf == nil:
		out.Body = nil
		out.ContentLength = 0
	default:
		out.Body = io.NopCloser(bytes.NewReader(b.buf))
		out.ContentLength = int64(len(b.buf))
		buf := b.buf
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	}
}

// forward walks the plan until a hop answers or nothing is left.
func (p *Proxy) forward(in *http.Request) (*http.Response, error) {
	c := p.config()
	ex := exchangeFrom(in.Context())
	b, err := prepareBody(in, int64(c.MaxRetryBody))
	if err != nil {
		return nil, errorf(http.StatusBadRequest, CodeBadRequest, "", "reading request body: %v", err)
	}
	retriable := idempotent(in.Method) && b.replayable
	if b.replayable {
		// The body is already here: asking the next hop to confirm it
		// wants it would only add a round trip (or a 1s wait on a hop that
		// ignores Expect).
		in.Header.Del("Expect")
	}
	p.budget.deposit()

	// The URL as the client sent it (absolute-form) keys carp: no
	// re-serialisation on the hot path.
	plan := p.planner.Plan(selection.Request{Method: in.Method, URL: ex.url, ClientIP: ex.client})
	var lastErr *Error
	hop, ok := plan.Next()
	for ok {
		r := p.attemptHop(in, hop, &plan, b, retriable)
		if r.full {
			hop, ok = plan.Next() // at max_conn now: skipped, not failed
			continue
		}
		hop = r.a.hop // a hedge may have won
		if r.err == nil {
			resp := r.resp
			if hop.Peer != nil && hop.Peer.Type() == peers.Sibling && siblingMiss(resp.StatusCode) {
				// A sibling's 504 to only-if-cached is a miss; it never
				// fetches for us. Not a failure, not a retry.
				discard(resp)
				hop, ok = plan.Next()
				continue
			}
			if c.retryStatus[resp.StatusCode] && retriable {
				next, more := plan.Next()
				if more && p.budget.withdraw() {
					p.metrics.retry("status")
					discard(resp)
					hop, ok = next, more
					continue
				}
				if more {
					p.metrics.budgetExhausted()
				}
			}
			ex.hop, ex.hopped = hop, true
			return resp, nil
		}
		if in.Context().Err() != nil {
			return nil, in.Context().Err() // client gone
		}
		a := r.a
		if a.wroteHeaders.Load() && b.rest != nil {
			// The streaming body was (partly) consumed: it cannot be sent
			// again, whatever the class.
			return nil, errorf(http.StatusBadGateway, CodeBadGateway, hopName(hop), "%v", r.err)
		}
		peerName := hopName(hop)
		class := classify(a, r.err)
		switch class {
		case connectFailed:
			lastErr = errorf(http.StatusBadGateway, CodeConnectFailed, peerName, "%v", r.err)
		case beforeWrite:
			if lastErr == nil || lastErr.Code != CodeConnectFailed {
				lastErr = errorf(http.StatusBadGateway, CodeBadGateway, peerName, "%v", r.err)
			}
		case timedOut:
			lastErr = errorf(http.StatusGatewayTimeout, CodeTimeout, peerName, "no response within read_timeout (%s)", c.ReadTimeout)
			// A per-try timeout is retriable exactly when 504 is.
			if !retriable || !c.retryStatus[http.StatusGatewayTimeout] {
				return nil, lastErr
			}
		case afterWrite:
			lastErr = errorf(http.StatusBadGateway, CodeBadGateway, peerName, "%v", r.err)
			if !retriable {
				return nil, lastErr
			}
		}
		if class == timedOut || class == afterWrite {
			if !p.budget.withdraw() {
				p.metrics.budgetExhausted()
				return nil, lastErr
			}
		}
		next, more := plan.Next()
		if more {
			p.metrics.retry(failureReasons[class])
		}
		hop, ok = next, more
	}
	if lastErr != nil {
		return nil, lastErr
	}
	return nil, errorf(http.StatusServiceUnavailable, CodeNoPeers, "", "no live next hop for %s (all peers dead, unknown, drained or full, and direct = %q)", in.URL.Host, c.Direct)
}

// siblingMiss reports whether a sibling's answer means "not from me": the
// 504 of an only-if-cached miss, a refusal to serve us (401, 403, 407) or
// a failure of its own (5xx). A cached 404 is a hit and is passed on.
func siblingMiss(status int) bool {
	switch {
	case status == http.StatusUnauthorized, status == http.StatusForbidden, status == http.StatusProxyAuthRequired:
		return true
	}
	return status >= 500
}

func hopName(h selection.Hop) string {
	if h.Peer == nil {
		return ""
	}
	return h.Peer.Name()
}

// try sends the request to a's hop. It accounts the peer's in-flight
// slot, which the response body's Close (or a failure) releases along with
// the attempt's context.
func (p *Proxy) try(a *attempt, in *http.Request, b *body, retriable bool) tryResult {
	peer := a.hop.Peer
	if peer != nil && !p.acct.BeginRequest(peer) {
		a.cancel()
		return tryResult{a: a, full: true}
	}
	done := func() {
		if peer != nil {
			p.acct.EndRequest(peer)
		}
		a.cancel()
	}
	ctx := context.WithValue(a.ctx, attemptKey{}, a)
	ctx = httptrace.WithClientTrace(ctx, a.trace())
	// ReverseProxy already gave us a private copy of the headers; only a
	// sibling's request changes them, so only it copies them again.
	out := in.WithContext(ctx)
	b.install(out)
	if peer != nil && peer.Type() == peers.Sibling {
		out.Header = in.Header.Clone()
		appendCacheControl(out.Header, "only-if-cached")
	}
	ts := p.transportsFor(peer)
	t := ts.fresh
	if retriable {
		t = ts.reuse
	}
	resp, err := t.RoundTrip(out)
	if err != nil {
		done()
		return tryResult{a: a, err: err}
	}
	rb := &releaseBody{ReadCloser: resp.Body, release: done}
	if rw, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		// An upgraded connection (e.g. WebSocket): ReverseProxy needs to
		// write to it.
		resp.Body = struct {
			*releaseBody
			io.Writer
		}{rb, rw}
	} else {
		resp.Body = rb
	}
	return tryResult{resp: resp, a: a}
}

// releaseBody ends the peer's in-flight accounting when the response body
// is closed.
type releaseBody struct {
	io.ReadCloser
	once    sync.Once
	release func()
}

func (r *releaseBody) Close() error {
	err := r.ReadCloser.Close()
	r.once.Do(r.release)
	return err
}

func discard(resp *http.Response) {
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// retryBudget caps after-write and status retries to a share of requests,
// with a floor of 10 per second so a quiet proxy can still retry. Tokens
// are counted in thousandths so that shares add up exactly. Every request
// deposits, so that path is a lock-free compare-and-swap; only a retry,
// which is rare, takes the mutex to refill by time.
type retryBudget struct {
	ratio  atomic.Int64 // thousandths of a retry earned per request
	tokens atomic.Int64 // thousandths

	mu   sync.Mutex // guards last and serialises withdrawals
	last time.Time
}

const (
	budgetMinPerSec = 10
	budgetCap       = 100
	milli           = 1000
)

func newRetryBudget(ratio float64) *retryBudget {
	b := &retryBudget{}
	b.tokens.Store(budgetCap * milli)
	b.setRatio(ratio)
	return b
}

func (b *retryBudget) setRatio(r float64) { b.ratio.Store(int64(r*milli + 0.5)) }

// add credits d thousandths, never above the cap.
func (b *retryBudget) add(d int64) {
	for {
		cur := b.tokens.Load()
		next := min(budgetCap*milli, cur+d)
		if next == cur || b.tokens.CompareAndSwap(cur, next) {
			return
		}
	}
}

func (b *retryBudget) deposit() { b.add(b.ratio.Load()) }

func (b *retryBudget) withdraw() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if !b.last.IsZero() {
		// Beyond a minute the bucket is full anyway; the bound also keeps
		// the product from overflowing after days of quiet.
		el := min(now.Sub(b.last), time.Minute)
		b.add(int64(el) * budgetMinPerSec * milli / int64(time.Second))
	}
	b.last = now
	for {
		cur := b.tokens.Load()
		if cur < milli {
			return false
		}
		if b.tokens.CompareAndSwap(cur, cur-milli) {
			return true
		}
	}
}

// countingWriter counts the body bytes sent to the client.
type countingWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *countingWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach Flush and Hijack.
func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *countingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
