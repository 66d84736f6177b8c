package forwarding

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/peerd/peerd/internal/h1"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
)

var (
	errUnexpected101  = errors.New("101 Switching Protocols to a request that asked for no upgrade")
	errTooManyInterim = errors.New("more than 8 interim (1xx) responses")
	errClientGone     = errors.New("the client went away")
)

// take returns the next hop of the plan that is not at max_conn (a full
// peer is skipped, not failed), with its in-flight slot taken, and an idle
// connection to it when the request may ride one.
func (tx *txn) take(hop selection.Hop, plan *selection.Plan, pooled bool) (selection.Hop, *upConn, bool) {
	p := tx.cc.p
	for {
		if hop.Peer == nil || p.acct.BeginRequest(hop.Peer) {
			break
		}
		var ok bool
		if hop, ok = plan.Next(); !ok {
			return hop, nil, false
		}
	}
	if pooled && tx.facts.retriable() {
		uc, extra := tx.poolFor(hop).get(tx.start, tx.cfg.PconnTimeout)
		if extra > 0 {
			tx.cc.p.unsolicited(hop, extra)
		}
		if uc != nil {
			return hop, uc, true
		}
	}
	return hop, nil, true
}

// connect returns an attempt with a connection, starting at hop and moving
// along the plan past hops that fail to connect; nil when none is left.
// pooled=false forces a new connection to the first hop (after a stale
// pooled one).
func (tx *txn) connect(hop selection.Hop, plan *selection.Plan, pooled bool) *attempt {
	p := tx.cc.p
	for {
		var uc *upConn
		var ok bool
		hop, uc, ok = tx.take(hop, plan, pooled)
		if !ok {
			return nil
		}
		if uc != nil {
			return tx.attemptOn(hop, uc, true)
		}
		if delay := p.hedgeDelay(tx.cfg, hop); delay > 0 {
			return tx.race(hop, plan, delay)
		}
		pl := tx.poolFor(hop)
		nc, err := p.dialHop(hop, tx.originFor(hop))
		if err == nil {
			return tx.attemptOn(hop, newUpConn(nc, pl), false)
		}
		tx.dialFailed(hop, err)
		var more bool
		if hop, more = plan.Next(); !more {
			return nil
		}
		p.metrics.retry(connectFailed.String())
		pooled = true
	}
}

func (tx *txn) attemptOn(hop selection.Hop, uc *upConn, reused bool) *attempt {
	a := &tx.a
	*a = attempt{hop: hop, progress: connected, reused: reused, conn: uc, begun: hop.Peer != nil}
	return a
}

// dialFailed records a failed connect and frees its slot.
func (tx *txn) dialFailed(hop selection.Hop, err error) {
	a := attempt{hop: hop, progress: dialling, err: err}
	tx.noteFailure(&a, connectFailed)
	if hop.Peer != nil {
		tx.cc.p.acct.EndRequest(hop.Peer)
	}
}

// race dials hop and, every hedge delay while no connection has arrived,
// the next hop of the plan too; the first connection wins.
func (tx *txn) race(hop selection.Hop, plan *selection.Plan, delay time.Duration) *attempt {
	p := tx.cc.p
	r := &race{p: p, results: make(chan dialResult, maxRacing)}
	pending := 0
	latest := hop
	start := func(h selection.Hop) {
		pending++
		latest = h
		go r.dial(h, tx.originFor(h), tx.poolFor(h))
	}
	start(hop)
	timer := time.NewTimer(delay)
	defer timer.Stop()
	// next takes the plan's next hop: an idle connection to it ends the
	// race at once; otherwise it is dialled.
	next := func() (*attempt, bool) {
		h, ok := plan.Next()
		if !ok {
			return nil, false
		}
		h, uc, ok := tx.take(h, plan, true)
		if !ok {
			return nil, false
		}
		if uc != nil {
			r.finish()
			return tx.attemptOn(h, uc, true), true
		}
		start(h)
		timer.Reset(p.hedgeDelay(tx.cfg, h))
		return nil, true
	}
	for {
		select {
		case res := <-r.results:
			pending--
			if res.err == nil {
				r.finish()
				return tx.attemptOn(res.hop, newUpConn(res.conn, res.pool), false)
			}
			tx.dialFailed(res.hop, res.err)
			if pending == 0 {
				p.metrics.retry(connectFailed.String())
				a, ok := next()
				if a != nil {
					return a
				}
				if !ok {
					r.finish()
					return nil
				}
			}
		case <-timer.C:
			if latest.Peer != nil {
				p.acct.MarkSlow(latest.Peer)
			}
			if pending >= maxRacing {
				continue
			}
			p.metrics.hedge()
			if a, _ := next(); a != nil {
				return a
			}
		}
	}
}

// originFor is where DIRECT goes for this request (the zero origin for a
// peer).
func (tx *txn) originFor(hop selection.Hop) origin {
	if hop.Peer != nil {
		return origin{}
	}
	if tx.origin.host == "" {
		req := &tx.req
		tx.origin = origin{host: string(req.Host), port: uint16(tx.port), tls: tx.https()}
	}
	return tx.origin
}

// poolFor is the idle list of a hop for this request.
func (tx *txn) poolFor(hop selection.Hop) *pool {
	p := tx.cc.p
	if hop.Peer != nil {
		return p.pools.forPeer(hop.Peer)
	}
	if len(tx.oKey) == 0 {
		req := &tx.req
		if req.Form == h1.AbsoluteForm {
			tx.oKey = append(tx.oKey, req.Scheme...)
		}
		tx.oKey = append(tx.oKey, "://"...)
		tx.oKey = append(tx.oKey, req.Host...)
		tx.oKey = append(append(tx.oKey, ':'), req.Port...)
	}
	return p.pools.forOrigin(tx.oKey)
}

// release ends an attempt that is not relayed: its connection goes back to
// the pool when its answer was short enough to read past, else it is
// closed; the peer's in-flight slot is freed.
func (tx *txn) release(a *attempt) {
	if a.conn != nil {
		if a.final && a.err == nil && tx.drain(a) {
			tx.repool(a.conn, a.hop, time.Now())
		} else {
			a.conn.close()
		}
		a.conn = nil
	}
	if a.begun {
		tx.cc.p.acct.EndRequest(a.hop.Peer)
		a.begun = false
	}
}

// repool returns c to its pool after an exchange, unless the next hop
// sent bytes past the end of its answer: those would answer the next
// request, for any URL, and could be stored under it. Such a connection
// is closed and the hop's broken answer counted and logged.
func (tx *txn) repool(c *upConn, hop selection.Hop, at time.Time) {
	if c.r.Buffered() > 0 {
		c.close()
		tx.cc.p.unsolicited(hop, 1)
		return
	}
	c.pool.put(c, at)
}

// drain reads past a short unused response so its connection can be
// reused; it reports whether that worked.
func (tx *txn) drain(a *attempt) bool {
	resp := &tx.resp
	kind := resp.BodyFor(tx.method == http.MethodHead)
	if !resp.KeepAlive || kind == h1.CloseBody || kind == h1.ChunkedBody || resp.ContentLength > 64<<10 {
		return false
	}
	c := a.conn
	c.r.Release(a.head)
	a.head = nil
	tx.upBody.Reset(c.r, kind, resp.ContentLength, tx.cfg.maxHeader)
	c.dl.readIn(time.Now(), time.Second)
	_, err := io.Copy(io.Discard, &tx.upBody)
	return err == nil
}

// exchange writes the request to the attempt's connection and reads the
// response head, recording how far it got.
func (tx *txn) exchange(a *attempt) {
	c := a.conn
	cfg := tx.cfg
	out := tx.requestHead(a.hop)
	headLen := len(out)
	chunkedOut := tx.bodyState == buffered && len(tx.body.Trailer) > 0
	if tx.bodyState == buffered && !chunkedOut {
		out = append(out, tx.buf...)
	}
	tx.out = out
	if c.rio.raw != nil && tx.bodyState != streaming && !chunkedOut && len(out) <= 16<<10 {
		// The whole request in one write, then the answer's first bytes,
		// in one poll cycle (see rawIO).
		c.dl.readIn(time.Now(), min(cfg.ReadTimeout, watchAfter))
		n, werr, _ := c.rio.sendAndWait(out)
		if n >= headLen {
			a.progress = headWritten
		}
		if werr != nil {
			a.err = werr
			return
		}
		if n < len(out) {
			// The socket would not take it all at once: the rest the
			// usual way.
			c.dl.writeIn(time.Now(), cfg.ReadTimeout)
			m, err := c.nc.Write(out[n:])
			if n+m >= headLen {
				a.progress = headWritten
			}
			if err != nil {
				a.err = err
				return
			}
		}
		if tx.bodyState != noBody {
			a.progress = bodyWritten
		}
		// What arrived is buffered; receive reads the rest (or finds the
		// connection closed, or the deadline passed, again).
		tx.receive(a)
		return
	}
	if tx.bodyState != noBody || len(out) > 8<<10 {
		// A short head into an idle connection cannot block; a body can.
		c.dl.writeIn(time.Now(), cfg.ReadTimeout)
	}
	n, err := c.nc.Write(out)
	if n >= headLen {
		a.progress = headWritten
	}
	if err != nil {
		a.err = err
		return
	}
	switch {
	case chunkedOut:
		h1.WriteChunk(c.w, tx.buf)
		h1.WriteLastChunk(c.w, tx.body.Trailer)
		err = c.w.Flush()
	case tx.bodyState == streaming:
		err = tx.streamBody(c)
	}
	if err != nil {
		if !errors.Is(err, errClientBody) {
			a.err = err
			return
		}
		a.err = err
		a.clientBody = true
		return
	}
	if tx.bodyState != noBody {
		a.progress = bodyWritten
	}
	tx.receive(a)
}

// errClientBody: the client's request body broke while it was relayed.
var errClientBody = errors.New("the client's request body broke off")

// streamBody sends the buffered part of a long body and then the rest as
// it arrives from the client, framed as the client framed it.
func (tx *txn) streamBody(c *upConn) error {
	chunked := tx.req.Chunked
	bufp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bufp)
	buf := *bufp
	write := func(b []byte) error {
		if chunked {
			return h1.WriteChunk(c.w, b)
		}
		_, err := c.w.Write(b)
		return err
	}
	if err := write(tx.buf); err != nil {
		return err
	}
	for {
		tx.cc.dl.readIn(time.Now(), tx.cfg.RequestTimeout)
		n, rerr := tx.body.Read(buf)
		if n > 0 {
			if err := write(buf[:n]); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			tx.bodyDone = true
			break
		}
		if rerr != nil {
			var he h1.Error
			if !errors.As(rerr, &he) {
				tx.clientGone = true
			}
			return errClientBody
		}
	}
	if chunked {
		h1.WriteLastChunk(c.w, tx.body.Trailer)
	}
	return c.w.Flush()
}

// watchAfter is how long peerd waits for a response head before it also
// watches the client, so that a client that leaves frees its slot at once
// even while a next hop thinks for minutes.
const watchAfter = time.Second

// receive reads the final response head, relaying interim (1xx) ones to
// an HTTP/1.1 client, except 100 Continue: peerd answered that itself.
func (tx *txn) receive(a *attempt) {
	c := a.conn
	cfg := tx.cfg
	now := time.Now()
	deadline := now.Add(cfg.ReadTimeout)
	var w *watcher
	defer func() {
		if w != nil {
			w.stop()
		}
	}()
	for interim := 0; ; {
		slice := deadline.Sub(now)
		if w == nil && slice > watchAfter {
			slice = watchAfter
		}
		c.dl.readIn(now, slice)
		head, err := c.r.ReadHead(cfg.maxHeader)
		if err != nil {
			gone := w != nil && w.gone.Load()
			if now = time.Now(); isTimeout(err) && now.Before(deadline) && !gone {
				if w == nil && tx.bodyDone {
					w = tx.cc.watch(c.nc)
				}
				continue
			}
			if gone {
				a.err = errClientGone
				return
			}
			a.err = err
			a.gotBytes = c.r.Buffered() > 0 || err == h1.ErrHeadTooLarge
			a.timedOut = isTimeout(err) && !a.gotBytes
			return
		}
		a.gotBytes = true
		if err := h1.ParseResponse(head, &tx.resp); err != nil {
			a.err = err
			return
		}
		st := tx.resp.Status
		if st >= 200 || (st == http.StatusSwitchingProtocols && tx.upgrade != nil) {
			a.final, a.status, a.head = true, st, head
			if a.progress < responseHead {
				a.progress = responseHead
			}
			return
		}
		if st == http.StatusSwitchingProtocols {
			a.err = errUnexpected101
			return
		}
		if interim++; interim > 8 {
			a.err = errTooManyInterim
			return
		}
		if st != http.StatusContinue && tx.req.Minor == 1 {
			tx.out = tx.interimHead(tx.out[:0], &tx.resp)
			tx.cc.w.Write(tx.out)
			if tx.cc.w.Flush() != nil {
				tx.clientGone = true
			}
			a.progress = sentToClient
		}
		c.r.Release(head)
	}
}

// relay sends the final response to the client as it arrives, and
// returns the upstream connection to its pool when it stays usable.
func (tx *txn) relay(a *attempt) outcome {
	c := a.conn
	cc := tx.cc
	resp := &tx.resp
	if resp.Status == http.StatusSwitchingProtocols {
		return tx.upgraded(a)
	}
	if done, out := tx.admit(a); done {
		return out
	}
	kind := resp.BodyFor(tx.method == http.MethodHead)
	chunked := false
	switch kind {
	case h1.ChunkedBody, h1.CloseBody:
		if tx.req.Minor == 1 {
			chunked = true
		} else {
			tx.keepAlive = false // HTTP/1.0: the end of the body is the close
		}
	}
	if !tx.bodyDone {
		tx.keepAlive = false
	}
	tx.hop, tx.hopped = a.hop, true
	tx.out = tx.responseHead(tx.out[:0], resp, kind, chunked)
	tx.ctype = append(tx.ctype[:0], resp.Get("Content-Type")...)
	cc.w.Write(tx.out)
	tx.headSent, tx.status = true, resp.Status
	a.progress = sentToClient
	c.r.Release(a.head)
	a.head = nil
	tx.upBody.Reset(c.r, kind, resp.ContentLength, tx.cfg.maxHeader)
	err := tx.copyBody(c, chunked)
	if tx.cw != nil {
		tx.cw.Finish(err == nil && tx.upBody.Done())
	}
	if err == nil && chunked {
		h1.WriteLastChunk(cc.w, tx.upBody.Trailer)
	}
	if err == nil {
		if tx.after() == keepOpen && cc.r.Buffered() == 0 && cc.rio.raw != nil {
			tx.flushLater = true // sent while waiting for the next request
		} else if cc.w.Flush() != nil {
			err = errClientGone
		}
	}
	reusable := err == nil && resp.KeepAlive && kind != h1.CloseBody && tx.upBody.Done()
	if reusable {
		tx.repool(c, a.hop, tx.start)
	} else {
		c.close()
	}
	a.conn = nil
	tx.release(a)
	if err != nil {
		// A body that broke halfway: the client must see a cut, never a
		// spliced answer; the connection is closed.
		if errors.Is(err, errClientGone) {
			tx.clientGone = true
		}
		return closeConn
	}
	return tx.after()
}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyBody copies the response body to the client, flushing whenever the
// next read would wait for the network, so that a streamed answer reaches
// the client as it arrives while a short one costs one write.
func (tx *txn) copyBody(c *upConn, chunked bool) error {
	cc := tx.cc
	if tx.upBody.Done() {
		return nil
	}
	bufp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bufp)
	for !tx.upBody.Done() {
		if c.r.Buffered() == 0 {
			if cc.w.Flush() != nil {
				return errClientGone
			}
			c.dl.readIn(time.Now(), tx.cfg.ReadTimeout)
		}
		n, err := tx.upBody.Read(*bufp)
		if n > 0 {
			tx.cw.Write((*bufp)[:n])
			var werr error
			if chunked {
				werr = h1.WriteChunk(cc.w, (*bufp)[:n])
			} else {
				_, werr = cc.w.Write((*bufp)[:n])
			}
			if werr != nil {
				return errClientGone
			}
			tx.bytes += int64(n)
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

// Heads.

// requestHead builds the request head for hop into tx.out: absolute URI
// to peers, origin-form to the origin; hop-by-hop fields removed; Host from
// the URI; Via and X-Forwarded-For appended; the peer's login; framing by
// the body as peerd sends it.
func (tx *txn) requestHead(hop selection.Hop) []byte {
	req := &tx.req
	cfg := tx.cfg
	b := tx.out[:0]
	b = append(b, req.Method...)
	b = append(b, ' ')
	if hop.Peer != nil {
		b = append(b, req.Target...)
	} else {
		if len(req.PathQuery) == 0 || req.PathQuery[0] != '/' {
			b = append(b, '/')
		}
		b = append(b, req.PathQuery...)
	}
	b = append(b, " HTTP/1.1\r\nHost: "...)
	if req.HostBracketed {
		b = append(append(append(b, '['), req.Host...), ']')
	} else {
		b = append(b, req.Host...)
	}
	if len(req.Port) > 0 {
		b = append(append(b, ':'), req.Port...)
	}
	b = append(b, "\r\n"...)
	sibling := hop.Peer != nil && hop.Peer.Type() == peers.Sibling
	var via, xff, cc bool
	for _, f := range req.Fields {
		switch {
		case f.HopByHop(req.ConnTokens), f.Kind == h1.Host, f.Kind == h1.ProxyAuthorization, f.Kind == h1.Expect,
			f.Kind == h1.ContentLength, f.Kind == h1.MaxForwards && tx.maxFwd >= 0:
			continue
		case f.Kind == h1.Via:
			via = true
			continue
		case f.Kind == h1.XForwardedFor:
			xff = true
			continue
		case sibling && f.Kind == h1.CacheControl:
			cc = true
			continue
		case tx.stale != nil && (f.Kind == h1.IfNoneMatch || f.Kind == h1.IfModifiedSince):
			// Revalidating: the cache's own validators go instead, and
			// the client's preconditions are answered from the result.
			continue
		}
		b = appendField(b, f.Name, f.Value)
	}
	if tx.stale != nil {
		b = tx.stale.AppendConditionals(b)
	}
	b = appendJoined(b, "Via", req.Fields, h1.Via, via, cfg.via)
	b = appendJoined(b, "X-Forwarded-For", req.Fields, h1.XForwardedFor, xff, tx.cc.remoteStr)
	if sibling {
		b = append(b, "Cache-Control: "...)
		if cc {
			b = appendValues(b, req.Fields, h1.CacheControl)
			if !hasDirective(req.Fields, "Cache-Control", "only-if-cached") {
				b = append(b, ", only-if-cached"...)
			}
		} else {
			b = append(b, "only-if-cached"...)
		}
		b = append(b, "\r\n"...)
	}
	if tx.maxFwd >= 0 {
		b = append(b, "Max-Forwards: "...)
		b = strconv.AppendInt(b, int64(tx.maxFwd), 10)
		b = append(b, "\r\n"...)
	}
	if hop.Peer != nil {
		if login := hop.Peer.Login(); login != "" {
			b = appendLogin(b, login)
		}
	}
	if tx.upgrade != nil {
		b = append(b, "Connection: Upgrade\r\nUpgrade: "...)
		b = append(append(b, tx.upgrade...), "\r\n"...)
	}
	switch {
	case tx.bodyState == streaming && req.Chunked, tx.bodyState == buffered && len(tx.body.Trailer) > 0:
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	case tx.bodyState == streaming:
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, req.ContentLength, 10)
		b = append(b, "\r\n"...)
	case tx.bodyState == buffered:
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(tx.buf)), 10)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

// responseHead builds the head the client gets for resp.
func (tx *txn) responseHead(b []byte, resp *h1.Response, kind h1.Body, chunked bool) []byte {
	b = appendStatusLine(b, resp)
	b = tx.appendResponseFields(b, resp)
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
	b = tx.appendForwardedCacheStatus(b, resp.Status)
	b = tx.appendProxyStatus(b, resp.Status)
	switch {
	case !tx.keepAlive:
		b = append(b, "Connection: close\r\n"...)
	case tx.req.Minor == 0:
		b = append(b, "Connection: keep-alive\r\n"...)
	}
	return append(b, "\r\n"...)
}

// interimHead builds a 1xx head for the client.
func (tx *txn) interimHead(b []byte, resp *h1.Response) []byte {
	b = appendStatusLine(b, resp)
	b = tx.appendResponseFields(b, resp)
	return append(b, "\r\n"...)
}

func appendStatusLine(b []byte, resp *h1.Response) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(resp.Status), 10)
	b = append(b, ' ')
	if len(resp.Reason) > 0 {
		b = append(b, resp.Reason...)
	} else {
		b = append(b, http.StatusText(resp.Status)...)
	}
	return append(b, "\r\n"...)
}

// appendResponseFields copies the end-to-end fields of resp and appends
// peerd's Via.
func (tx *txn) appendResponseFields(b []byte, resp *h1.Response) []byte {
	via := false
	for _, f := range resp.Fields {
		switch {
		case f.HopByHop(resp.ConnTokens), f.Kind == h1.ContentLength, f.Kind == h1.ProxyAuthenticate:
			continue
		case f.Kind == h1.Via:
			via = true
			continue
		}
		b = appendField(b, f.Name, f.Value)
	}
	return appendJoined(b, "Via", resp.Fields, h1.Via, via, tx.cfg.via)
}

func appendField(b, name, value []byte) []byte {
	b = append(b, name...)
	b = append(b, ": "...)
	b = append(b, value...)
	return append(b, "\r\n"...)
}

// appendJoined appends one field named name: the values of the message's
// fields of kind k (when it has any), then last, joined by ", " — how Via
// and X-Forwarded-For grow by a hop.
func appendJoined(b []byte, name string, fields []h1.Field, k h1.Kind, has bool, last string) []byte {
	b = append(append(b, name...), ": "...)
	if has {
		b = append(appendValues(b, fields, k), ", "...)
	}
	b = append(b, last...)
	return append(b, "\r\n"...)
}

// appendValues appends the values of every field of kind k, joined by
// ", ".
func appendValues(b []byte, fields []h1.Field, k h1.Kind) []byte {
	first := true
	for _, f := range fields {
		if f.Kind == k {
			if !first {
				b = append(b, ", "...)
			}
			b = append(b, f.Value...)
			first = false
		}
	}
	return b
}
