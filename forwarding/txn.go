package forwarding

// This file holds a transaction: one client request from its head to its
// access-log line. serve runs the checks (checks.go) and hands the
// request to the cache's steps and the forwarder (forward.go); fail
// answers with peerd's own error; finish writes the log line and the
// metrics. The transaction is the one place that knows all the parts;
// none of them points back at it.

import (
	"net/http"
	"time"

	"github.com/peerd/peerd/internal/h1"
)

// outcome says what becomes of the client connection after a request.
type outcome uint8

const (
	closeConn outcome = iota
	keepOpen
)

// txn is one request on a client connection. It is reused from request
// to request, with its buffers.
type txn struct {
	cc *clientConn
	p  *Proxy
	w  *clientWriter
	rq request
	wk walker     // the forward walk over the plan (walk.go)
	cl cacheLayer // the cache's steps around the forward (layer.go)
	reply
	ctype []byte // the response's Content-Type, for the access log
	// icpTimedOut: the ICP query's timeout passed before every answer
	// came; the access log's hierarchy code says TIMEOUT_, as Squid's.
	icpTimedOut bool
	target      []byte // the request target rewritten with the canonical host
	out         []byte // a head being built for the client
	logBuf      []byte
}

// init binds the transaction to its connection, once.
func (tx *txn) init(cc *clientConn) {
	tx.cc, tx.p, tx.w = cc, cc.p, &cc.w
	tx.rq.body.dl, tx.rq.body.w = &cc.dl, &cc.w
	tx.wk.init(&tx.rq, cc, &cc.w)
	tx.cl.init(&tx.rq, &cc.w, cc)
}

// begin starts a transaction for a request head (nil when the head could
// not be read) under generation g. head is copied: the connection's
// buffer moves on.
func (tx *txn) begin(g *generation, start time.Time, head []byte) {
	tx.rq.reset(g, &tx.cc.from, start)
	tx.rq.head = append(tx.rq.head, head...)
	tx.w.begin(g.cfg.WriteTimeout)
	tx.reply = reply{}
	tx.cl.reset()
	tx.ctype, tx.target, tx.out, tx.logBuf = tx.ctype[:0], tx.target[:0], tx.out[:0], tx.logBuf[:0]
	tx.icpTimedOut = false
}

// serve handles one parsed request head.
func (tx *txn) serve() outcome {
	defer tx.finish()
	rq := &tx.rq
	c := rq.gen.cfg
	cc := tx.cc
	req := &rq.req
	canonicalMethod(rq.head)
	if err := h1.ParseRequest(rq.head, req); err != nil {
		e := errorf(h1.Status(err), CodeBadRequest, "", "%v", err)
		e.Close = true
		tx.fail(e)
		return closeConn
	}
	rq.method = methodString(req.Method)
	tx.beginTrace()
	tx.w.keepAlive = req.KeepAlive
	rq.body.done = !rq.hasBody()
	if e := tx.verifyMember(); e != nil {
		tx.fail(e)
		return tx.after()
	}
	if rq.member != "" {
		rq.gen.members.Served() // answered here as the owner
	}
	if rq.member == "" && (!cc.from.ok || !c.allowed(cc.from.addr)) {
		tx.fail(errorf(http.StatusForbidden, CodeAccessDenied, "", "client %s is not in [proxy] allow", cc.from.str))
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
		rq.port = h1.PortNumber(req.Port)
		if e := rq.checkDestination(true); e != nil {
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
			"%s %s: peerd is a forward proxy; send an absolute URI (GET http://host/path) or CONNECT host:port", rq.method, req.Target))
		return tx.after()
	}
	if !h1.EqualFold(req.Scheme, "http") && !h1.EqualFold(req.Scheme, "https") {
		tx.fail(errorf(http.StatusBadRequest, CodeBadRequest, "", "unsupported URL scheme %q", req.Scheme))
		return tx.after()
	}
	switch {
	case len(req.Port) > 0:
		rq.port = h1.PortNumber(req.Port)
	case rq.https():
		rq.port = 443
	default:
		rq.port = 80
	}
	if e := rq.checkDestination(false); e != nil {
		tx.fail(e)
		return tx.after()
	}
	if req.Upgrade != nil {
		if v := rq.gen.policy.Upgrade(string(req.Upgrade)); v != "" {
			rq.upgrade = req.Upgrade
		}
	}
	if done := tx.maxForwards(); done {
		return tx.after()
	}
	if rq.gen.cache == nil {
		return tx.forward(tx.w)
	}
	// The cache's steps: before the forward (a lookup that may answer),
	// the forward through its decorator, and after (stale_if_dead).
	if e, done := tx.cl.before(); done {
		if e != nil {
			tx.fail(e)
		}
		return tx.after()
	}
	return tx.forward(&tx.cl)
}

// closeIfStopping makes the answer being written the connection's last
// when peerd is stopping (or handing over): its head says Connection:
// close, so the client opens a new connection for its next request
// instead of sending it on one about to close (HAProxy's
// idle-close-on-response).
func (tx *txn) closeIfStopping() {
	if tx.w.keepAlive && tx.p.conns.closing() {
		tx.w.keepAlive = false
	}
}

// after says what becomes of the connection once peerd answered: it stays
// open only when the request's body (if any) was consumed, so the next
// request's framing is known.
func (tx *txn) after() outcome {
	if tx.w.keepAlive && tx.rq.body.done && !tx.w.gone {
		return keepOpen
	}
	return closeConn
}

// fail answers the client with an error peerd made itself.
func (tx *txn) fail(e *Error) {
	tx.code, tx.errType = e.Code, errorType(e)
	if e.hopSet {
		tx.about(e.hop)
	}
	if e.Close || !tx.rq.body.done {
		// A body not read leaves the connection's framing lost.
		tx.w.keepAlive = false
	}
	tx.closeIfStopping()
	if tx.rq.gen.cache != nil {
		tx.cl.failed(e)
	}
	var err error
	tx.out, err = tx.w.errorPage(e, tx.rq.method == http.MethodHead, tx.proxyStatusForError(e)+tx.cl.errorStatus()+tx.errorFields(), tx.out)
	if err == errHeadWritten {
		tx.w.cutShort(e.Status)
	}
}

// finish writes the access log line and metrics of the transaction.
func (tx *txn) finish() {
	p := tx.p
	tx.cl.done()
	if tx.w.status == 0 && !tx.w.gone {
		return // nothing was asked (a client that went away idle)
	}
	elapsed := time.Since(tx.rq.start)
	hier := tx.hierarchy()
	tx.finishTrace(tx.rq.start.Add(elapsed), hier)
	p.metrics.observeRequest(&tx.cc.memo, tx.w.status, hier, elapsed)
	tx.countBytes()
	if al := tx.rq.gen.log; al != nil {
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
	in := tx.receivedBytes()
	out := tx.sentBytes()
	m := tx.p.metrics
	m.clientIn.Add(float64(in))
	m.clientOut.Add(float64(out))
	if tx.hopped && tx.hop.Peer != nil {
		tx.hop.Peer.AddBytes(in, out)
	}
}

// receivedBytes is what the client sent: its head, its body and what it
// sent through a tunnel.
func (tx *txn) receivedBytes() int64 {
	n := int64(len(tx.rq.head)) + tx.tunnelOut
	if tx.rq.hasBody() {
		n += tx.rq.body.r.Count
	}
	return n
}

// sentBytes is what the client got (see clientWriter.sent), with what the
// far side sent through a tunnel.
func (tx *txn) sentBytes() int64 { return tx.w.sent() + tx.tunnelIn }

func (tx *txn) hierarchy() string {
	if !tx.hopped && !tx.errHop {
		return "HIER_NONE"
	}
	return tx.hop.Code
}
