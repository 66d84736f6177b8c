package forwarding

// This file holds the forward: a plain request's body read, its plan
// walked (walk.go), and the answer relayed to the client through a sink —
// the client writer itself, or the cache's decorator in front of it —
// with the body copied as it arrives and the upstream connection pooled
// when it stays usable.

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/peerd/peerd/internal/h1"
	"github.com/peerd/peerd/selection"
)

// sink is where a relayed response goes: the client writer, or the
// cache's decorator around it, which stores what passes and may answer
// instead.
type sink interface {
	// offer is given a final response head before any of it is written:
	// handled means the sink answered the client itself (a 304 that
	// refreshed a stored response, a stale one standing in for a 5xx) and
	// released the attempt.
	offer(a *attempt) (handled bool, out outcome)
	// fields appends the sink's own fields to the head (Cache-Status).
	fields(b []byte, status int) []byte
	// body writes a piece of the body (last: the body is whole with it);
	// with the client gone a storing sink still keeps it.
	body(p []byte, last bool) error
	// keepOnAbort says whether a body goes on to its end after the client
	// left, having got bytes of length (-1: not known).
	keepOnAbort(got, length int64) bool
	// end says the relay is over (whole: the body arrived complete). It
	// reports whether the sink must settle after the client has the whole
	// answer, which must then be flushed, not left buffered.
	end(whole bool) (settle bool)
	// settle waits (briefly) for what end started: a response kept on
	// disk only is visible once it is committed.
	settle()
	// passThrough: the sink keeps nothing of the body (it may be moved
	// by the kernel, never seen).
	passThrough() bool
}

// The client writer is the sink of a request no cache sees.
func (w *clientWriter) offer(*attempt) (bool, outcome)    { return false, 0 }
func (w *clientWriter) fields(b []byte, _ int) []byte     { return b }
func (w *clientWriter) keepOnAbort(_, _ int64) bool       { return false }
func (w *clientWriter) end(bool) bool                     { return false }
func (w *clientWriter) settle()                           {}
func (w *clientWriter) passThrough() bool                 { return true }
func (w *clientWriter) body(p []byte, _ bool) (err error) { return w.bodyBytes(p) }

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
	if rq.member != "" {
		// A fetch as the owner, for another member: its load.
		rq.gen.members.FetchBegin()
		defer rq.gen.members.FetchEnd()
	}
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
			tx.w.keepAlive = false // HTTP/1.0: the end of the body is the close
		}
	}
	if !rq.body.done {
		tx.w.keepAlive = false
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
