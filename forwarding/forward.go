package forwarding

// This file holds a transaction's flow and the forward. serve runs the
// checks (checks.go) and hands the request to the cache's steps
// (layer.go) and the forward: a plain request's body read, its plan
// walked (walk.go), and the answer relayed to the client through a sink
// (heads.go) — the client writer itself, or the cache's decorator in
// front of it — under the response head made here, with the body copied
// as it arrives and the upstream connection pooled when it stays usable.

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/peerd/peerd/internal/h1"
	"github.com/peerd/peerd/selection"
)

// The client writer is the sink of a request no cache sees.
func (w *clientWriter) offer(*attempt) (bool, outcome)    { return false, 0 }
func (w *clientWriter) fields(b []byte, _ int) []byte     { return b }
func (w *clientWriter) keepOnAbort(_, _ int64) bool       { return false }
func (w *clientWriter) end(bool) bool                     { return false }
func (w *clientWriter) settle()                           {}
func (w *clientWriter) passThrough() bool                 { return true }
func (w *clientWriter) body(p []byte, _ bool) (err error) { return w.bodyBytes(p) }

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
	tx.w.asked(req.KeepAlive)
	rq.body.done = !rq.hasBody()
	if e := tx.vouch(); e != nil {
		tx.fail(e)
		return tx.after()
	}
	if !rq.vouched && (!cc.from.ok || !c.allowed(cc.from.addr)) {
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

// forward sends a plain request along its plan and relays the answer
// through to.
func (tx *txn) forward(to sink) outcome {
	p := tx.p
	rq := &tx.rq
	c := rq.gen.cfg
	if err := tx.readBody(); err != nil {
		if tx.w.gone {
			return closeConn
		}
		e := errorf(http.StatusBadRequest, CodeBadRequest, "", "reading the request body: %v", err)
		e.Close = true
		tx.fail(e)
		return closeConn
	}
	// An upgrade may switch protocols on its connection: never replayed,
	// never on an idle connection, never hedged.
	b := &rq.body
	rq.facts = facts{idempotent: idempotent(rq.method) && rq.upgrade == nil, replayable: b.state != streaming,
		retry504: c.retryStatus[http.StatusGatewayTimeout]}
	rq.facts.hedgeable = rq.facts.retriable() && b.state != streaming && !b.trailered() && rq.upgrade == nil
	p.budget.deposit()
	p.hedges.request(rq.start)
	sr := selection.Request{Method: rq.method, URL: urlString(rq.req.Target), ClientIP: rq.from.str,
		Host: urlString(rq.req.Host), Port: rq.port, User: rq.user}
	if p.icp != nil && (rq.method == http.MethodGet || rq.method == http.MethodHead) && len(rq.req.Scheme) > 0 {
		// Ask the ICP peers first: a HIT goes first (a sibling's is
		// then the only way it is asked over HTTP), else the first
		// parent to answer MISS.
		sr.First, sr.FirstCode, sr.SkipICPSiblings, tx.icpTimedOut = p.icp.Query(context.Background(), rq.req.Target)
	}
	defer tx.fetchFor()()
	for {
		tx.share(to, &sr)
		tx.wk.begin(rq.gen.routing.Plan(sr))
		a := tx.wk.walk()
		if tx.w.gone {
			return closeConn
		}
		if a == nil {
			break
		}
		out := tx.answer(a, to)
		if !tx.cl.refetch || tx.w.gone {
			return out
		}
		// A 304 selected nothing stored, and the copy is gone: the plan
		// is walked once more, unconditionally (no next 304 can be the
		// cache's: rq.stale is nil).
		tx.cl.refetch = false
	}
	e := tx.wk.finalError()
	if e == nil {
		e = errorf(http.StatusServiceUnavailable, CodeNoPeers, "",
			"no live next hop for %s (all peers dead, unknown, drained or full, and direct = %q)", rq.req.Host, c.Direct)
	}
	if to != sink(tx.w) {
		// The cache's step after the forward: a stale response may stand
		// in (stale_if_dead).
		if done := tx.cl.unanswered(e); done {
			return tx.after()
		}
	}
	tx.fail(e)
	return tx.after()
}

// readBody reads the request body as far as it is kept for a retry; a
// client that asked for 100-continue is told to go on first.
func (tx *txn) readBody() error {
	rq := &tx.rq
	if !rq.hasBody() {
		return nil
	}
	if rq.req.Expect100 && rq.req.Minor == 1 {
		if err := tx.w.continue100(); err != nil {
			return err
		}
	}
	return rq.body.read(tx.cc.r, &rq.req, int64(rq.gen.cfg.MaxRetryBody), rq.gen.cfg.maxHeader)
}

// answer gives the client the attempt's response, or its error.
func (tx *txn) answer(a *attempt, to sink) outcome {
	if a.progress >= responseHead && a.err == nil {
		return tx.relay(a, to)
	}
	a.release()
	e := tx.wk.finalError()
	if e == nil {
		e = errorf(http.StatusBadGateway, CodeBadGateway, hopName(a.hop), "no response")
	}
	if tx.w.headSent.Load() {
		return closeConn // truncated: the client sees a cut, never a splice
	}
	if !e.hopSet {
		e.hop, e.hopSet = a.hop, true
	}
	tx.fail(e)
	return tx.after()
}

// relay sends the final response to the client as it arrives, and
// returns the upstream connection to its pool when it stays usable.
func (tx *txn) relay(a *attempt, to sink) outcome {
	c := a.conn
	cc := tx.cc
	rq := &tx.rq
	resp := &a.resp
	if resp.Status == http.StatusSwitchingProtocols {
		return tx.upgraded(a)
	}
	if done, out := to.offer(a); done {
		tx.answeredBy(a.hop) // the cache answered with what the hop said
		return out
	}
	kind := resp.BodyFor(rq.method == http.MethodHead)
	chunked := false
	switch kind {
	case h1.ChunkedBody, h1.CloseBody:
		if rq.req.Minor == 1 {
			chunked = true
		} else {
			tx.w.last() // HTTP/1.0: the end of the body is the close
		}
	}
	tx.answeredBy(a.hop)
	tx.out = tx.responseHead(tx.out[:0], resp, kind, chunked, to)
	tx.ctype = append(tx.ctype[:0], resp.Get("Content-Type")...)
	if err := tx.w.writeHead(resp.Status, tx.out); err != nil {
		a.release()
		return closeConn
	}
	tx.w.chunked = chunked
	a.progress = sentToClient
	c.r.Release(a.head)
	a.head = nil
	a.body.Reset(c.r, kind, resp.ContentLength, rq.gen.cfg.maxHeader)
	err := tx.copyBody(a, to)
	// A client that left may still have let the whole body reach the
	// cache (clientLeft).
	settle := to.end(a.body.Done() && (err == nil || errors.Is(err, errClientGone)))
	if err == nil {
		err = tx.w.endBody(a.body.Trailer)
	}
	if err == nil {
		err = tx.w.done(tx.after() == keepOpen && cc.quiet() && !settle)
	}
	// A body kept on disk only is visible once committed: the client has
	// it all, and its next request finds it stored.
	if settle {
		to.settle()
	}
	hop := a.hop
	a.end(err == nil && kind != h1.CloseBody, rq.start)
	if err != nil {
		if !errors.Is(err, errClientGone) && tx.w.retract() {
			// Nothing of the answer had left yet: the client gets an
			// error made whole here, not a connection closed on it.
			e := errorf(http.StatusBadGateway, CodeBadGateway, hopName(hop), "the answer broke before any of it reached the client: %v", err)
			e.hop, e.hopSet = hop, true
			tx.fail(e)
			return tx.after()
		}
		// A body that broke halfway: the client must see a cut, never a
		// spliced answer; the connection is closed.
		return closeConn
	}
	return tx.after()
}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyBody copies the response body to the client, flushing whenever the
// next read would wait for the network, so that a streamed answer reaches
// the client as it arrives while a short one costs one write.
func (tx *txn) copyBody(a *attempt, to sink) error {
	c := a.conn
	if a.body.Done() {
		return nil
	}
	if moved, err := tx.spliceBody(a, to); moved {
		return err
	}
	bufp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bufp)
	for !a.body.Done() {
		if c.r.Buffered() == 0 {
			if tx.w.flush() != nil {
				return tx.clientLeft(a, to, *bufp)
			}
			c.dl.readIn(time.Now(), tx.rq.gen.cfg.ReadTimeout)
		}
		n, err := a.body.Read(*bufp)
		if n > 0 && to.body((*bufp)[:n], a.body.Done()) != nil {
			return tx.clientLeft(a, to, *bufp)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// clientLeft is what becomes of a body whose client went away: one the
// cache is storing goes on to its end when its quick_abort settings say
// it is worth finishing (Squid's quick_abort_*), so that the next client
// finds it stored; either way the client is gone.
func (tx *txn) clientLeft(a *attempt, to sink, buf []byte) error {
	c := a.conn
	length := int64(-1)
	if a.resp.BodyFor(false) == h1.LengthBody {
		length = a.resp.ContentLength
	}
	if a.body.Done() || !to.keepOnAbort(a.body.Count, length) {
		return errClientGone
	}
	for !a.body.Done() {
		c.dl.readIn(time.Now(), tx.rq.gen.cfg.ReadTimeout)
		n, err := a.body.Read(buf)
		if n > 0 {
			to.body(buf[:n], a.body.Done())
		}
		if err != nil {
			break
		}
	}
	return errClientGone
}

// spliceMin is the least body left after what is buffered for which the
// kernel moves the bytes (below it the copy through user space costs
// less than setting up the move).
const spliceMin = 64 << 10

// spliceBody moves a long Content-Length body that nothing keeps (no
// cache stores it) from the next hop to the client in the kernel, when
// both are plain TCP connections: what is buffered goes first, the rest
// by splice(2). moved is false when the body was left to copyBody.
func (tx *txn) spliceBody(a *attempt, to sink) (moved bool, err error) {
	c := a.conn
	up, ok := c.nc.(*net.TCPConn)
	if !ok || tx.w.chunked || !to.passThrough() || a.body.Left()-int64(c.r.Buffered()) <= spliceMin {
		return false, nil
	}
	if _, ok := tx.cc.nc.(*net.TCPConn); !ok {
		return false, nil
	}
	if c.r.Buffered() > 0 {
		// What arrived with the head (a Read of no more than the
		// buffered bytes never touches the socket).
		bufp := copyBuffers.Get().(*[]byte)
		defer copyBuffers.Put(bufp)
		for c.r.Buffered() > 0 {
			k, _ := a.body.Read((*bufp)[:min(len(*bufp), c.r.Buffered())])
			if to.body((*bufp)[:k], a.body.Done()) != nil {
				return true, errClientGone
			}
		}
	}
	if tx.w.flush() != nil {
		return true, errClientGone
	}
	n, err := tx.w.spliceFrom(up, &c.dl, a.body.Left(), tx.rq.gen.cfg.ReadTimeout)
	a.body.Moved(n)
	return true, err
}

// responseHead builds the head the client gets for resp, relayed from
// hop; to adds its fields (the cache's Cache-Status).
func (tx *txn) responseHead(b []byte, resp *h1.Response, kind h1.Body, chunked bool, to sink) []byte {
	b = appendStatusLine(b, resp)
	b = tx.rq.appendResponseFields(b, resp, tx.hop)
	switch {
	case kind == h1.LengthBody:
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, resp.ContentLength, 10)
		b = append(b, "\r\n"...)
	case chunked:
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	case kind == h1.NoBody && resp.ContentLength >= 0 && resp.Status != http.StatusNoContent && resp.Status >= 200:
		// HEAD and 304 keep the length of the body they stand for.
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, resp.ContentLength, 10)
		b = append(b, "\r\n"...)
	}
	b = to.fields(b, resp.Status)
	b = append(b, tx.xCache()...)
	b = tx.appendProxyStatus(b, resp.Status)
	return tx.appendConnection(b)
}
