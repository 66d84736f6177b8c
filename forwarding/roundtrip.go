package forwarding

// This file holds the round trip an attempt makes on the connection it
// owns: the request written (head and body), the response head read
// (interim answers relayed through the client side), a CONNECT's reply,
// and the connection pooled, drained or closed at the end (release, end);
// and the class of how it ended (class).

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/peerd/peerd/internal/h1"
	"github.com/peerd/peerd/internal/stall"
	"github.com/peerd/peerd/peers"
)

var (
	errUnexpected101  = errors.New("101 Switching Protocols to a request that asked for no upgrade")
	errTooManyInterim = errors.New("more than 8 interim (1xx) responses")
	// errClientBody: the client's request body broke while it was relayed.
	errClientBody = errors.New("the client's request body broke off")
	// errGivenUp: a late wait on a parent that died meanwhile.
	errGivenUp = errors.New("no response head, and the parent was found dead meanwhile")
)

// release ends an attempt that is not relayed: its connection goes back to
// the pool when its answer was short enough to read past, else it is
// closed; the peer's in-flight slot is freed.
func (a *attempt) release() {
	a.endSpan()
	if a.conn != nil {
		if a.final && a.err == nil && !a.tunnel && a.drain() {
			a.repool(time.Now())
		} else {
			a.conn.close()
		}
		a.conn = nil
	}
	if a.begun {
		a.h.acct.EndRequest(a.hop.Peer)
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
		a.h.unsolicited(a.hop, 1)
		return
	}
	c.pool.put(c, at)
}

// drain reads past a short unused response so its connection can be
// reused; it reports whether that worked.
func (a *attempt) drain() bool {
	resp := &a.resp
	kind := resp.BodyFor(a.headReq)
	if !resp.KeepAlive || kind == h1.CloseBody || kind == h1.ChunkedBody || resp.ContentLength > 64<<10 {
		return false
	}
	c := a.conn
	c.r.Release(a.head)
	a.head = nil
	a.body.Reset(c.r, kind, resp.ContentLength, a.h.maxHeader)
	c.dl.readIn(time.Now(), time.Second)
	_, err := io.Copy(io.Discard, &a.body)
	return err == nil
}

// roundTrip writes rq to the attempt's connection and reads the final
// response head, relaying interim answers to side (nil: they are
// dropped). When fbt is set and passes with no response byte, it returns
// with a.late set, still waiting: the walker decides (a hedge, or await).
func (a *attempt) roundTrip(rq *request, side clientSide, fbt time.Duration) {
	c := a.conn
	cfg := rq.gen.cfg
	b := &rq.body
	a.beginSpan(rq)
	out := rq.appendHead(a.out[:0], a.hop, a.role, a.span)
	headLen := len(out)
	chunkedOut := b.trailered()
	if b.state == buffered && !chunkedOut {
		out = append(out, b.buf...) // head and body in one write
	}
	a.out = out
	var late time.Time
	if c.rio.raw != nil && b.state != streaming && !chunkedOut && len(out) <= 16<<10 {
		// The whole request in one write, then the answer's first bytes,
		// in one poll cycle (see rawIO); one deadline covers both.
		now := a.sent()
		late = a.lateAt(fbt)
		wait := min(cfg.ReadTimeout, watchAfter)
		if !late.IsZero() && late.Sub(now) < wait {
			c.dl.readBy(now, late, lateSlack(a, late)) // the wait ends when the head is late
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
		if b.state != noBody {
			a.progress = bodyWritten
		}
		// What arrived is buffered; receive reads the rest (or finds the
		// connection closed, or the deadline passed, again).
		a.receive(rq, side, now, late)
		return
	}
	if b.state != noBody || len(out) > 8<<10 {
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
		h1.WriteChunk(c.w, b.buf)
		h1.WriteLastChunk(c.w, b.r.Trailer)
		err = c.w.Flush()
	case b.state == streaming:
		err = a.streamBody(rq)
	}
	if err != nil {
		a.err = err
		a.clientBody = errors.Is(err, errClientBody)
		return
	}
	if b.state != noBody {
		a.progress = bodyWritten
	}
	now := a.sent()
	a.receive(rq, side, now, a.lateAt(fbt))
}

// sent records when the request went out (its head times judge a peer).
func (a *attempt) sent() time.Time {
	now := time.Now()
	if a.hop.Peer != nil {
		a.writtenAt = now
	}
	return now
}

// lateAt is when the head is late for the first-byte timeout fbt (zero:
// never).
func (a *attempt) lateAt(fbt time.Duration) time.Time {
	if fbt <= 0 || a.writtenAt.IsZero() {
		return time.Time{}
	}
	return a.writtenAt.Add(fbt)
}

// streamBody sends the buffered part of a long body and then the rest as
// it arrives from the client, framed as the client framed it.
func (a *attempt) streamBody(rq *request) error {
	c := a.conn
	b := &rq.body
	chunked := rq.req.Chunked
	bufp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bufp)
	buf := *bufp
	write := func(p []byte) error {
		if chunked {
			return h1.WriteChunk(c.w, p)
		}
		_, err := c.w.Write(p)
		return err
	}
	if err := write(b.buf); err != nil {
		return err
	}
	for {
		n, rerr := b.next(buf)
		if n > 0 {
			if err := write(buf[:n]); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return errClientBody
		}
	}
	if chunked {
		h1.WriteLastChunk(c.w, b.r.Trailer)
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

// await goes on waiting for the final head of an attempt that was late,
// until read_timeout from when its request went out; a wait on a parent
// that dies meanwhile (by answers: its HTTP probes failed too) is given up
// as a timeout, so that a request that may be retried goes to the next
// hop instead of waiting on a parent known to be hung.
func (a *attempt) await(rq *request, side clientSide) {
	a.late, a.wasLate = false, true
	a.receive(rq, side, a.writtenAt, time.Time{})
}

// lateCheck is how often a wait that was late looks at its parent's state.
const lateCheck = 250 * time.Millisecond

// receive reads the final response head, relaying interim (1xx) ones to
// side for an HTTP/1.1 client, except 100 Continue: peerd answered that
// itself. sent is when the request went out: read_timeout counts from
// there; at late (zero: never) it returns with a.late set.
func (a *attempt) receive(rq *request, side clientSide, sent, late time.Time) {
	c := a.conn
	cfg := rq.gen.cfg
	if sent.IsZero() {
		sent = time.Now()
	}
	now := time.Now()
	// The deadlines move on by the time peerd itself was stalled since
	// the request went out (stall_guard): a deadline that fired because
	// peerd did not run is no parent's lateness.
	deadline := a.h.stalls.Deadline(sent, cfg.ReadTimeout)
	var lateBy stall.Deadline
	if !late.IsZero() {
		lateBy = a.h.stalls.Deadline(sent, late.Sub(sent))
	}
	var w *watcher
	defer func() {
		if w != nil {
			w.stop()
		}
	}()
	for interim := 0; ; {
		if lateBy.Passed(now) && a.progress < sentToClient && c.r.Buffered() == 0 {
			a.late = true // nothing of the head came in time: the walker decides
			return
		}
		slice := deadline.Left(now)
		if w == nil && slice > watchAfter {
			slice = watchAfter
		}
		if a.wasLate {
			if pe := a.hop.Peer; pe != nil && pe.Health().State() == peers.Dead {
				a.err, a.timedOut = errGivenUp, true
				return
			}
			if a.refused && unbudgeted(a.hop) && a.progress < sentToClient && c.r.Buffered() == 0 {
				a.refused, a.late = false, true // the walker hedges it now
				return
			}
			slice = min(slice, lateCheck)
		}
		byLate := lateBy.Set() && lateBy.Left(now) > 0 && lateBy.Left(now) <= slice
		if byLate {
			c.dl.readBy(now, lateBy.At(), lateSlack(a, lateBy.At())) // late exactly
		} else {
			c.dl.readIn(now, slice)
		}
		head, err := c.r.ReadHead(cfg.maxHeader)
		if err != nil {
			gone := w != nil && w.gone.Load()
			now = time.Now()
			// read_timeout passed while peerd was stalled: it waits on.
			if isTimeout(err) && !deadline.Passed(now) && !gone {
				if byLate || lateBy.Passed(now) {
					continue // late at the top of the loop, or woke early: waits again to late
				}
				if w == nil && side != nil && rq.body.done {
					w = side.watch(c.nc)
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
		if st >= 200 || (st == http.StatusSwitchingProtocols && rq.upgrade != nil) {
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
		if st != http.StatusContinue && rq.req.Minor == 1 && side != nil {
			a.out = rq.interimHead(a.out[:0], &a.resp)
			side.interim(a.out)
			a.progress = sentToClient
		}
		c.r.Release(head)
	}
}

// connectVia asks a parent to open the tunnel. It reports whether the
// parent's final reply head was read (a.final, a.status); a.err says how
// it broke otherwise. The client is watched while the parent thinks: a
// client that leaves releases everything at once.
func (a *attempt) connectVia(rq *request, side clientSide) {
	c := a.conn
	cfg := rq.gen.cfg
	a.out = rq.appendConnect(a.out[:0], a.hop)
	c.dl.writeIn(time.Now(), cfg.ReadTimeout)
	if _, err := c.nc.Write(a.out); err != nil {
		a.err = fmt.Errorf("sending CONNECT: %w", err)
		return
	}
	a.progress = headWritten
	w := side.watch(c.nc)
	c.dl.readIn(time.Now(), cfg.ReadTimeout)
	head, _, err := a.finalHead(cfg.maxHeader)
	w.stop()
	if err != nil {
		a.err = fmt.Errorf("reading the CONNECT reply: %w", err)
		a.timedOut = isTimeout(err)
		return
	}
	a.final, a.status, a.head, a.progress = true, a.resp.Status, head, responseHead
}

// finalHead reads heads until a final one; interim answers are dropped
// (a CONNECT's are never taken for the tunnel's start). A head larger
// than max_header_size is a broken answer.
func (a *attempt) finalHead(maxHeader int) (head []byte, gotBytes bool, err error) {
	c := a.conn
	for interim := 0; interim <= 8; interim++ {
		head, err = c.r.ReadHead(maxHeader)
		if err != nil {
			return nil, c.r.Buffered() > 0 || err == h1.ErrHeadTooLarge, err
		}
		if err := h1.ParseResponse(head, &a.resp); err != nil {
			return nil, true, err
		}
		if a.resp.Status >= 200 {
			return head, true, nil
		}
		if a.resp.Status == http.StatusSwitchingProtocols && !a.tunnel {
			return nil, true, errUnexpected101
		}
		c.r.Release(head)
	}
	return nil, true, errTooManyInterim
}

// class says what kind of failure a finished attempt is. retryStatus
// reports whether its final status is in retry_on_status.
func (a *attempt) class(retryStatus bool) failure {
	switch {
	case a.final && a.role.Sibling() && siblingMiss(a.status):
		// A sibling never fetches for us: its 504 (or any refusal) to
		// only-if-cached means "not here". (A fleet member asked as a
		// key's owner fetches: its answer is an answer.)
		return siblingMissed
	case a.final:
		switch {
		case a.progress == sentToClient:
			return notFailed
		case a.unreached:
			return unreached
		case a.own:
			return ownFailure
		case retryStatus:
			return statusRetry
		}
		return notFailed
	case a.progress == sentToClient, a.clientBody:
		// An interim response reached the client, or the client's own
		// body broke: nothing can be redone.
		return committed
	case a.late && a.err == nil:
		return lateHead
	case a.err == nil:
		return notFailed
	case errors.Is(a.err, errGivenUp):
		return givenUp
	case a.progress <= dialling:
		return connectFailed
	case a.reused && !a.gotBytes && !a.timedOut:
		// The peer closed the idle connection before our request reached
		// it (the write succeeded into the kernel, the read saw EOF or a
		// reset with no byte of answer). Only retriable requests ride
		// pooled connections, so redoing it is safe.
		return staleConn
	case a.progress == connected:
		return beforeWrite
	case a.timedOut:
		return timedOut
	}
	return afterWrite
}
