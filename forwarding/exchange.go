package forwarding

// This file holds what an attempt does on the connection it owns: the
// request written (head and body), the response head read (interim
// answers relayed), and the connection pooled, drained or closed at the
// end (release, end).

import (
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/peerd/peerd/internal/h1"
)

// release ends an attempt that is not relayed: its connection goes back to
// the pool when its answer was short enough to read past, else it is
// closed; the peer's in-flight slot is freed.
func (a *attempt) release() {
	if a.conn != nil {
		if a.final && a.err == nil && !a.tx.facts.tunnel && a.drain() {
			a.repool(time.Now())
		} else {
			a.conn.close()
		}
		a.conn = nil
	}
	if a.begun {
		a.tx.cc.p.acct.EndRequest(a.hop.Peer)
		a.begun = false
	}
}

// end ends a relayed attempt: its connection goes back to the pool when
// its whole answer was read and it may carry another (reusable), else it
// is closed; then the attempt is released.
func (a *attempt) end(reusable bool, at time.Time) {
	if reusable && a.resp.KeepAlive && a.body.Done() {
		a.repool(at)
	} else {
		a.conn.close()
	}
	a.conn = nil
	a.release()
}

// repool returns the connection to its pool after an exchange, unless the
// next hop sent bytes past the end of its answer: those would answer the
// next request, for any URL, and could be stored under it. Such a
// connection is closed and the hop's broken answer counted and logged.
func (a *attempt) repool(at time.Time) {
	c := a.conn
	if c.r.Buffered() > 0 {
		c.close()
		a.tx.cc.p.unsolicited(a.hop, 1)
		return
	}
	c.pool.put(c, at)
}

// drain reads past a short unused response so its connection can be
// reused; it reports whether that worked.
func (a *attempt) drain() bool {
	resp := &a.resp
	kind := resp.BodyFor(a.tx.method == http.MethodHead)
	if !resp.KeepAlive || kind == h1.CloseBody || kind == h1.ChunkedBody || resp.ContentLength > 64<<10 {
		return false
	}
	c := a.conn
	c.r.Release(a.head)
	a.head = nil
	a.body.Reset(c.r, kind, resp.ContentLength, a.tx.cfg.maxHeader)
	c.dl.readIn(time.Now(), time.Second)
	_, err := io.Copy(io.Discard, &a.body)
	return err == nil
}

// exchange writes the transaction's request to the attempt's connection
// and reads the response head, recording how far it got.
func (a *attempt) exchange() {
	tx := a.tx
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
		now := time.Now()
		wait := min(cfg.ReadTimeout, watchAfter)
		if a.hop.Peer != nil {
			a.writtenAt = now // (its head times judge the parent)
		}
		late, hedgeable := tx.lateAt(a)
		if hedgeable && late.Sub(now) < wait {
			c.dl.readBy(now, late, lateSlack(a, late)) // the wait ends when the head is late: the hedge starts then
		} else {
			c.dl.readIn(now, wait)
		}
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
		// connection closed, or the deadline passed, again), its
		// deadlines counted from when the request went out.
		a.receive(now, late, hedgeable)
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
		err = a.streamBody()
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
	now := time.Now()
	if a.hop.Peer != nil {
		a.writtenAt = now
	}
	late, hedgeable := tx.lateAt(a)
	a.receive(now, late, hedgeable)
}

// errClientBody: the client's request body broke while it was relayed.
var errClientBody = errors.New("the client's request body broke off")

// streamBody sends the buffered part of a long body and then the rest as
// it arrives from the client, framed as the client framed it.
func (a *attempt) streamBody() error {
	tx, c := a.tx, a.conn
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

// lateSlack is how much earlier than late a's wait for its head may end
// (see deadlines.readBy): an eighth of its first-byte timeout, so that a
// pooled connection's deadline moves about once per eighth of that timeout
// instead of once per request. A wait that ends early waits again.
func lateSlack(a *attempt, late time.Time) time.Duration { return late.Sub(a.writtenAt) / 8 }

// watchAfter is how long peerd waits for a response head before it also
// watches the client, so that a client that leaves frees its slot at once
// even while a next hop thinks for minutes.
const watchAfter = time.Second

// receive reads the final response head, relaying interim (1xx) ones to
// an HTTP/1.1 client, except 100 Continue: peerd answered that itself.
// sent is when the request went out: read_timeout counts from there.
// late is when the head is late, and hedgeable whether the request may
// then be hedged (tx.lateAt).
func (a *attempt) receive(sent, late time.Time, hedgeable bool) {
	tx := a.tx
	c := a.conn
	cfg := tx.cfg
	now := sent
	deadline := now.Add(cfg.ReadTimeout)
	var w *watcher
	defer func() {
		if w != nil {
			w.stop()
		}
	}()
	for interim := 0; ; {
		if hedgeable && !now.Before(late) && a.progress < sentToClient && c.r.Buffered() == 0 {
			// The head is late and nothing of it came: the request goes
			// to the next hop too, and the first final head wins.
			hedgeable = false
			if w != nil {
				w.stop()
				w = nil
			}
			if tx.hedge(a, deadline) {
				if errors.Is(a.err, errClientGone) {
					tx.clientGone = true
				}
				return
			}
		}
		slice := deadline.Sub(now)
		if w == nil && slice > watchAfter {
			slice = watchAfter
		}
		byLate := hedgeable && now.Before(late) && late.Sub(now) <= slice
		if byLate {
			c.dl.readBy(now, late, lateSlack(a, late)) // the hedge starts at the first-byte timeout exactly
		} else {
			c.dl.readIn(now, slice)
		}
		head, err := c.r.ReadHead(cfg.maxHeader)
		if err != nil {
			gone := w != nil && w.gone.Load()
			if now = time.Now(); isTimeout(err) && now.Before(deadline) && !gone {
				if byLate || (hedgeable && !now.Before(late)) {
					continue // hedged at the top of the loop, or woke early: waits again to late
				}
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
		if err := h1.ParseResponse(head, &a.resp); err != nil {
			a.err = err
			return
		}
		st := a.resp.Status
		if st >= 200 || (st == http.StatusSwitchingProtocols && tx.upgrade != nil) {
			a.final, a.status, a.head = true, st, head
			a.headAt = time.Now()
			if !a.writtenAt.IsZero() {
				a.firstByte = a.headAt.Sub(a.writtenAt)
			}
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
			tx.out = tx.interimHead(tx.out[:0], &a.resp)
			tx.cc.w.Write(tx.out)
			if tx.cc.w.Flush() != nil {
				tx.clientGone = true
			}
			a.progress = sentToClient
		}
		c.r.Release(head)
	}
}
