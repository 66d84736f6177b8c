package forwarding

// This file holds what the walker makes of an attempt that ended: its
// class, from what the hop's role says of a final answer (its own
// failure, worth a retry elsewhere, an error it reports of its own next
// hop); how the hop is judged by its answer (contract section 16: answer
// failures by class, a complete answer's head time; a late head is judged
// by the hedge, race.go); what a final answer that is the request's
// answer tells the role; and an answer read whole before any of it is
// relayed, when the role asks for that.

import (
	"errors"
	"syscall"
	"time"

	"github.com/peerd/peerd/internal/h1"
	"github.com/peerd/peerd/internal/nexthop"
	"github.com/peerd/peerd/peers"
)

// classify says how a's step ended: a final answer (a CONNECT's reply
// too) is put to the hop's role; what the hop says of its own next hop
// goes to its health, never against it (that the request never reached
// its destination through it, that it has no next hop at all); the class
// is judged and its error kept for the client.
func (w *walker) classify(a *attempt) failure {
	retry := false
	if a.final {
		var said nexthop.Said
		a.own, retry, said = a.role.Failed(&a.resp, w.rq.gen.cfg.retryStatus[a.status])
		a.unreached = said.Unreached
		if said.Why != "" || said.NoNextHop {
			w.h.acct.Observe(a.hop.Peer, peers.Outcome{Event: peers.NextHopFailed, At: a.headAt, Detail: said.Why,
				Unreached: said.Unreached, NoNextHop: said.NoNextHop, Dest: w.rq.destination()})
		}
	}
	class := a.class(retry)
	if !w.rq.facts.tunnel {
		w.judge(a, class)
	}
	w.noteFailure(a, class)
	return class
}

// judge reports how a hop its role judges (a parent, or a key's owner)
// answered a request written to it whole: an answer failure (closed,
// reset, timeout, own_5xx; late is judged by the hedge) or a complete
// answer, which resets its count. What is not the hop's doing — a stale
// pooled connection, a client that left, an answer the parent gave about
// its own next hop — is neither. An answer is about what the role says
// (a parent's about its origin's host, an owner's about its key).
func (w *walker) judge(a *attempt, class failure) {
	pe := a.hop.Peer
	about, judged := a.role.Judged(w.rq.req.Host)
	if pe == nil || !judged || w.cw.gone || a.clientBody {
		return
	}
	if a.progress < headWritten || (w.rq.body.state != noBody && a.progress < bodyWritten && !a.final) {
		return // not written whole: nothing to judge
	}
	var c peers.AnswerClass
	switch class {
	case afterWrite:
		c = peers.AnswerClosed
		if errors.Is(a.err, syscall.ECONNRESET) {
			c = peers.AnswerReset
		}
	case timedOut:
		c = peers.AnswerTimeout
	case ownFailure:
		c = peers.AnswerOwn5xx
	case notFailed, statusRetry:
		if !a.final {
			return
		}
		c = peers.AnswerOK
	default:
		return
	}
	at := a.headAt // a complete answer is timed by its head, a clock read saved
	if c != peers.AnswerOK || at.IsZero() {
		at = time.Now()
	}
	fb := a.firstByte
	if c == peers.AnswerOK && !a.writtenAt.IsZero() {
		// peerd's own stalls are not the parent's time (stall_guard); a
		// timeout was already stretched by them (receive).
		fb -= w.h.stalls.Stalled(a.writtenAt, at)
	}
	w.h.acct.Observe(pe, peers.Outcome{Event: peers.Answered, Class: c, FirstByte: fb, At: at, Origin: peers.OriginHash(about)})
}

// answered tells a's role of a final answer that is the request's answer
// (not a failure of the hop's own), and takes the hierarchy code it
// names.
func (w *walker) answered(a *attempt) {
	if a.err != nil || !a.final || a.own {
		return
	}
	if code := a.role.Answered(&a.resp); code != "" {
		a.hop.Code = code
	}
}

// readWhole reads the whole body of a's answer before anything of it
// reaches the client, when its length is known and the hop's role asks
// for it (a key's owner, within what the cache keeps in memory): a hop
// that dies mid-body then fails the attempt, which the walker retries at
// the plan's hops, instead of cutting an answer already begun. Larger
// bodies, and those of unknown length, stream as they come.
func (w *walker) readWhole(a *attempt) {
	ch := w.rq.gen.cache
	if a.err != nil || !a.final || ch == nil || a.resp.BodyFor(a.headReq) != h1.LengthBody ||
		!a.role.Whole(a.resp.ContentLength, ch.MaxInMemory()) {
		return
	}
	c := a.conn
	c.dl.readIn(time.Now(), w.rq.gen.cfg.ReadTimeout)
	hl := len(a.head)
	if err := c.r.Buffer(hl + int(a.resp.ContentLength)); err != nil {
		a.err, a.final, a.gotBytes, a.timedOut = err, false, true, false
		return
	}
	// The head moved with the buffer: its slices are taken again.
	a.head = c.r.Peek()[:hl]
	if err := h1.ParseResponse(a.head, &a.resp); err != nil {
		a.err, a.final = err, false
	}
}
