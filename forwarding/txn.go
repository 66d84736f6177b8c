package forwarding

// This file holds a transaction: one client request from its head to its
// access-log line, and its ends. A connection begins it (conn.go), serve
// runs it (forward.go); fail answers with peerd's own error; finish
// writes the log line, the metrics and the trace's last span. The
// transaction is the one place that knows all the parts; none of them
// points back at it.

import (
	"net/http"
	"time"

	"github.com/peerd/peerd/tracing"
)

// outcome says what becomes of the client connection after a request.
type outcome uint8

const (
	closeConn outcome = iota
	keepOpen
	// detached: a tunnel has the connection now and ends the transaction
	// itself (tunnel.go).
	detached
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
	// detached: a tunnel ends the transaction, not the goroutine that
	// served it (finish waits for the tunnel's end).
	detached bool
	target   []byte // the request target rewritten with the canonical host
	out      []byte // a head being built for the client
	logBuf   []byte
}

// init binds the transaction to its connection, once.
func (tx *txn) init(cc *clientConn) {
	tx.cc, tx.p, tx.w = cc, cc.p, &cc.w
	tx.rq.body.dl, tx.rq.body.w = &cc.dl, &cc.w
	cc.w.req = &tx.rq.body
	tx.wk.init(&tx.rq, cc, &cc.w)
	tx.cl.init(&tx.rq, &cc.w, cc)
}

// after says what becomes of the connection once peerd answered, as the
// client writer decided it (clientWriter.keeps).
func (tx *txn) after() outcome {
	if tx.w.keeps() {
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
	if e.Close {
		tx.w.last()
	}
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
	if tx.detached {
		return // the tunnel's end finishes it
	}
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
		if f := al.format; f != nil {
			tx.logBuf = f.appendLine(tx.logBuf[:0], tx, al, elapsed, hier)
		} else {
			tx.logBuf = tx.appendLog(tx.logBuf[:0], al, elapsed, hier)
		}
		al.file.Write(tx.logBuf)
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
		tx.hop.Peer.Health().AddBytes(in, out)
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

// finishTrace exports the request's span.
func (tx *txn) finishTrace(end time.Time, hier string) {
	rq := &tx.rq
	e := tx.p.tracer.Load()
	if rq.trace == nil || e == nil || tx.refused() && !e.Config().Refused {
		return
	}
	st := tx.w.status
	attrs := []tracing.Attr{
		tracing.String("http.request.method", rq.method),
		tracing.String("url.full", tx.traceURL()),
		tracing.Int("http.response.status_code", int64(st)),
		tracing.String("client.address", rq.from.str),
		tracing.String("peerd.hierarchy", hier),
	}
	failed := ""
	if st >= 500 {
		failed = http.StatusText(st)
	}
	e.Export(rq.trace.Span(rq.method, end, attrs, failed))
}
