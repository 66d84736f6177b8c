package forwarding

// This file holds a transaction: one client request from its head to its
// access-log line — serve (the checks in checks.go, then the cache or the
// forward walk over the plan), the answer, the failures noted, the request
// body kept for a retry, and the error answer.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"
	"unsafe"

	"github.com/peerd/peerd/internal/h1"
	"github.com/peerd/peerd/selection"
)

// outcome says what becomes of the client connection after a request.
type outcome uint8

const (
	closeConn outcome = iota
	keepOpen
)

// body states of a request.
const (
	noBody uint8 = iota
	buffered
	streaming
)

// txn is one request on a client connection: what it asked, what happened
// to it, and the buffers it uses. It is reused from request to request.
type txn struct {
	cc    *clientConn
	cfg   *runtimeConfig
	start time.Time
	head  []byte // the request head, copied out of the connection's buffer
	req   h1.Request
	// method is the request's method as a string (shared constants for the
	// common ones, so no allocation).
	method string

	// What the client got (see reply.go).
	reply
	keepAlive  bool // the client connection may carry another request
	clientGone bool
	tunnelled  bool
	ctype      []byte // the response's Content-Type, for the access log
	// flushLater: the end of the answer is still buffered, for the
	// connection to send together with waiting for the next request.
	flushLater bool

	// The request body.
	body      h1.BodyReader
	bodyState uint8
	bodyDone  bool // the body was read to its end (or there was none)
	buf       []byte
	maxFwd    int // Max-Forwards to send on, -1 for none
	facts     facts
	port      int    // the destination port (the URL's, or its scheme's)
	upgrade   []byte // the Upgrade offered on, when the policy allows it

	// Upstream.
	plan    selection.Plan // the plan being walked (a hedge takes from it)
	out     []byte         // head being built
	a       attempt        // the attempt in progress (its buffers are reused)
	origin  origin
	oKey    []byte // the DIRECT pool key, scheme://host:port
	target  []byte // the request target rewritten with the canonical host
	user    string // the authenticated user ([auth]); "" without
	claimed string // the user a wrong credential named (the access log's)
	// icpTimedOut: the ICP query's timeout passed before every answer
	// came; the access log's hierarchy code says TIMEOUT_, as Squid's.
	icpTimedOut bool
	lastErr     *Error
	denied      *Error // a destination the policy refused on the way: it outranks lastErr
	logBuf      []byte

	// The cache layer in front of the forwarder (layer.go), and the
	// front the forwarder relays through: &cl when the cache sees the
	// request, nil otherwise.
	cl    cacheLayer
	front front
}

// begin starts a transaction for a request head (nil when the head could
// not be read). head is copied: the connection's buffer moves on.
//
// Everything but the kept buffers is zeroed in place: a composite literal
// assigned through the pointer would be built in a temporary and copied,
// two passes over the whole txn per request.
func (tx *txn) begin(c *runtimeConfig, start time.Time, head []byte) {
	cc, hd, buf, out, oKey, target, logBuf, ctype := tx.cc, tx.head[:0], tx.buf[:0], tx.out[:0], tx.oKey[:0], tx.target[:0], tx.logBuf[:0], tx.ctype[:0]
	req, body, resp, abody, cq := tx.req, tx.body, tx.a.resp, tx.a.body, tx.cl.cq
	*tx = txn{}
	tx.cc, tx.cfg, tx.start = cc, c, start
	tx.countFrom(cc.handed())
	tx.head = append(hd, head...)
	tx.req, tx.body, tx.buf, tx.out = req, body, buf, out
	tx.a.resp, tx.a.body = resp, abody
	tx.oKey, tx.target, tx.logBuf, tx.ctype = oKey, target, logBuf, ctype
	tx.cl.cq = cq
	tx.maxFwd, tx.bodyDone = -1, true
}

var methods = [...]string{"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "TRACE", "PATCH", "CONNECT"}

// knownMethods are the methods Squid knows by name besides those: with
// them, a method in any case is taken as that method.
var knownMethods = [...]string{"PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK", "SEARCH",
	"REPORT", "MKACTIVITY", "CHECKOUT", "MERGE", "PURGE"}

// canonicalMethod writes a known method that the client sent in another
// case ("put", "Get") in capitals, in place in the request head, so that
// every check, the cache and every next hop see the one method Squid's
// relaxed parser would make of it (a rule on PUT is not passed by "put",
// which a Squid parent would forward as PUT). Other methods are kept as
// sent; rules compare them without regard to case.
func canonicalMethod(head []byte) {
	sp := bytes.IndexByte(head, ' ')
	if sp <= 0 || sp > len("MKACTIVITY") {
		return
	}
	m := head[:sp]
	lower := false
	for _, c := range m {
		lower = lower || 'a' <= c && c <= 'z'
	}
	if !lower {
		return
	}
	for _, k := range methods {
		if h1.EqualFold(m, k) {
			copy(m, k)
			return
		}
	}
	for _, k := range knownMethods {
		if h1.EqualFold(m, k) {
			copy(m, k)
			return
		}
	}
}

// methodString returns m as a string, without allocating for the common
// methods.
func methodString(m []byte) string {
	for _, s := range methods {
		if string(m) == s {
			return s
		}
	}
	return string(m)
}

// serve handles one parsed request head.
func (tx *txn) serve() outcome {
	defer tx.finish()
	c := tx.cfg
	cc := tx.cc
	req := &tx.req
	canonicalMethod(tx.head)
	if err := h1.ParseRequest(tx.head, req); err != nil {
		e := errorf(h1.Status(err), CodeBadRequest, "", "%v", err)
		e.Close = true
		tx.fail(e)
		return closeConn
	}
	tx.method = methodString(req.Method)
	tx.keepAlive = req.KeepAlive
	if req.Chunked || req.ContentLength > 0 {
		tx.bodyDone = false
	}
	if !cc.remoteOK || !c.allowed(cc.remote) {
		tx.fail(errorf(http.StatusForbidden, CodeAccessDenied, "", "client %s is not in [proxy] allow", cc.remoteStr))
		return tx.after()
	}
	if e := c.loopError(req.Fields); e != nil {
		tx.fail(e)
		return tx.after()
	}
	if e := tx.canonicalHost(); e != nil {
		tx.fail(e)
		return tx.after()
	}
	if req.Form == h1.AuthorityForm {
		tx.port = h1.PortNumber(req.Port)
		if e := tx.checkDestination(true); e != nil {
			if e.Code != CodeAuthRequired && e.Code != CodeAuthSlowed {
				e.Close = true // a refused tunnel ends its connection
				tx.fail(e)
				return closeConn
			}
			tx.fail(e) // the client may answer the challenge on it
			return tx.after()
		}
		return tx.serveConnect()
	}
	if req.Form != h1.AbsoluteForm {
		tx.fail(errorf(http.StatusBadRequest, CodeBadRequest, "",
			"%s %s: peerd is a forward proxy; send an absolute URI (GET http://host/path) or CONNECT host:port", tx.method, req.Target))
		return tx.after()
	}
	if !h1.EqualFold(req.Scheme, "http") && !h1.EqualFold(req.Scheme, "https") {
		tx.fail(errorf(http.StatusBadRequest, CodeBadRequest, "", "unsupported URL scheme %q", req.Scheme))
		return tx.after()
	}
	switch {
	case len(req.Port) > 0:
		tx.port = h1.PortNumber(req.Port)
	case tx.https():
		tx.port = 443
	default:
		tx.port = 80
	}
	if e := tx.checkDestination(false); e != nil {
		tx.fail(e)
		return tx.after()
	}
	if req.Upgrade != nil {
		if v := cc.p.policy.Load().Upgrade(string(req.Upgrade)); v != "" {
			tx.upgrade = req.Upgrade
		}
	}
	if done := tx.maxForwards(); done {
		return tx.after()
	}
	if ch := cc.p.cache.Load(); ch != nil {
		tx.cl.reset(tx, ch)
		return tx.cl.serve(tx)
	}
	return tx.forward(nil)
}

// splitLines splits a head into its lines, without CRLF, up to the blank
// line.
func splitLines(head []byte) [][]byte {
	var out [][]byte
	for len(head) > 0 {
		i := 0
		for i+1 < len(head) && !(head[i] == '\r' && head[i+1] == '\n') {
			i++
		}
		if i == 0 {
			break
		}
		out = append(out, head[:i])
		head = head[min(i+2, len(head)):]
	}
	return out
}

// urlString views the request target as a string for the planner, which
// only hashes it while the plan is built.
func urlString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// forward sends a plain request along its plan and relays the answer,
// through f when a layer is in front (nil: none).
func (tx *txn) forward(f front) outcome {
	tx.front = f
	p := tx.cc.p
	c := tx.cfg
	if err := tx.prepareBody(); err != nil {
		if tx.clientGone {
			return closeConn
		}
		e := errorf(http.StatusBadRequest, CodeBadRequest, "", "reading the request body: %v", err)
		e.Close = true
		tx.fail(e)
		return closeConn
	}
	// An upgrade may switch protocols on its connection: never replayed,
	// never on an idle connection.
	tx.facts = facts{idempotent: idempotent(tx.method) && tx.upgrade == nil, replayable: tx.bodyState != streaming, retry504: c.retryStatus[http.StatusGatewayTimeout]}
	p.budget.deposit()
	sr := selection.Request{Method: tx.method, URL: urlString(tx.req.Target), ClientIP: tx.cc.remoteStr,
		Host: urlString(tx.req.Host), Port: tx.port, User: tx.user}
	if p.icp != nil && (tx.method == http.MethodGet || tx.method == http.MethodHead) && len(tx.req.Scheme) > 0 {
		// Ask the ICP peers first: a HIT goes first (a sibling's is
		// then the only way it is asked over HTTP), else the first
		// parent to answer MISS.
		sr.First, sr.FirstCode, sr.SkipICPSiblings, tx.icpTimedOut = p.icp.Query(context.Background(), tx.req.Target)
	}
	tx.plan = p.planner.Plan(sr)
	a := tx.walk()
	if tx.clientGone {
		return closeConn
	}
	if a != nil {
		return tx.answer(a)
	}
	e := tx.finalError()
	if e == nil {
		e = errorf(http.StatusServiceUnavailable, CodeNoPeers, "",
			"no live next hop for %s (all peers dead, unknown, drained or full, and direct = %q)", tx.req.Host, c.Direct)
	}
	if f != nil {
		if done, out := f.unanswered(e); done {
			return out
		}
	}
	tx.fail(e)
	return tx.after()
}

// answer gives the client the attempt's response, or its error.
func (tx *txn) answer(a *attempt) outcome {
	if a.progress >= responseHead && a.err == nil {
		return tx.relay(a)
	}
	a.release()
	e := tx.finalError()
	if e == nil {
		e = errorf(http.StatusBadGateway, CodeBadGateway, hopName(a.hop), "no response")
	}
	if tx.headSent {
		return closeConn // truncated: the client sees a cut, never a splice
	}
	if !e.hopSet {
		e.hop, e.hopSet = a.hop, true
	}
	tx.fail(e)
	return tx.after()
}

// prepareBody reads up to max_retry_body of the request body, so that the
// request can be sent again; a longer body streams (the buffered part,
// then the rest) and makes the request non-retriable once written. A
// client that asked for 100-continue is told to go on first.
func (tx *txn) prepareBody() error {
	req := &tx.req
	if !req.Chunked && req.ContentLength <= 0 {
		return nil
	}
	if req.Expect100 && req.Minor == 1 {
		tx.cc.w.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		if err := tx.cc.w.Flush(); err != nil {
			tx.clientGone = true
			return err
		}
	}
	kind := h1.LengthBody
	if req.Chunked {
		kind = h1.ChunkedBody
	}
	tx.body.Reset(tx.cc.r, kind, req.ContentLength, tx.cfg.maxHeader)
	max := int64(tx.cfg.MaxRetryBody)
	if !req.Chunked && req.ContentLength > max {
		tx.bodyState = streaming
		return nil
	}
	for int64(len(tx.buf)) <= max {
		tx.cc.dl.readIn(time.Now(), tx.cfg.RequestTimeout)
		if len(tx.buf) == cap(tx.buf) {
			tx.buf = append(tx.buf, 0)[:len(tx.buf)]
		}
		n, err := tx.body.Read(tx.buf[len(tx.buf):min(cap(tx.buf), int(max)+1)])
		tx.buf = tx.buf[:len(tx.buf)+n]
		if err == io.EOF {
			tx.bodyState, tx.bodyDone = buffered, true
			return nil
		}
		if err != nil {
			var he h1.Error
			if !errors.As(err, &he) {
				tx.clientGone = true
			}
			return err
		}
	}
	tx.bodyState = streaming
	return nil
}

// closeIfStopping makes the answer being written the connection's last
// when peerd is stopping (or handing over): its head says Connection:
// close, so the client opens a new connection for its next request
// instead of sending it on one about to close (HAProxy's
// idle-close-on-response).
func (tx *txn) closeIfStopping() {
	if tx.keepAlive && tx.cc.p.conns.closing() {
		tx.keepAlive = false
	}
}

// fail answers the client with an error peerd made itself.
func (tx *txn) fail(e *Error) {
	tx.code, tx.errType = e.Code, errorType(e)
	if e.hopSet {
		tx.about(e.hop)
	}
	if e.Close {
		tx.keepAlive = false
	}
	if !tx.sendHead(e.Status) {
		tx.cutShort(e.Status)
		return
	}
	if !tx.bodyDone {
		// The body was not read: the connection's framing is lost after
		// this answer.
		tx.keepAlive = false
	}
	tx.closeIfStopping()
	writeError(tx.cc.w, e, tx.method == http.MethodHead, tx.keepAlive, tx.proxyStatusForError(e)+tx.cl.errorStatus()+tx.errorFields())
	if tx.cc.w.Flush() != nil {
		tx.clientGone = true
	}
}

// finish writes the access log line and metrics of the transaction.
func (tx *txn) finish() {
	p := tx.cc.p
	tx.cl.done()
	if tx.status == 0 && !tx.clientGone {
		return // nothing was asked (a client that went away idle)
	}
	elapsed := time.Since(tx.start)
	hier := tx.hierarchy()
	p.metrics.observeRequest(&tx.cc.memo, tx.status, hier, elapsed)
	tx.countBytes()
	if al := p.access.Load(); al != nil {
		if f := al.format.Load(); f != nil {
			tx.logBuf = f.appendLine(tx.logBuf[:0], tx, al, elapsed, hier)
		} else {
			tx.logBuf = tx.appendLog(tx.logBuf[:0], al, elapsed, hier)
		}
		al.Write(tx.logBuf)
	}
}

// countBytes adds the request's bytes to the client counters and, when a
// peer answered, to the peer's: what the client sent (head, body, tunnel)
// went to the peer, and what the client got came from it.
func (tx *txn) countBytes() {
	in := int64(len(tx.head)) + tx.tunnelOut
	if tx.req.Chunked || tx.req.ContentLength > 0 {
		in += tx.body.Count
	}
	out := tx.sentBytes()
	m := tx.cc.p.metrics
	m.clientIn.Add(float64(in))
	m.clientOut.Add(float64(out))
	if tx.hopped && tx.hop.Peer != nil {
		tx.hop.Peer.AddBytes(in, out)
	}
}

func (tx *txn) hierarchy() string {
	if !tx.hopped && !tx.errHop {
		return "HIER_NONE"
	}
	return tx.hop.Code
}
