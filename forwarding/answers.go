package forwarding

// This file holds how the forwarder judges a parent by its answers
// (contract section 16): the answer-failure class of an attempt, a
// parent's own 5xx, and the hedged request — when a parent's response
// head is late, the request also goes to the next hop of its plan, and
// the first final head wins.

import (
	"errors"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/peerd/peerd/internal/h1"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
)

// ownError reports a final 5xx a parent blames on itself: the last
// Proxy-Status member (the parent's own) with proxy_internal_error,
// proxy_configuration_error or proxy_internal_response, or Squid's
// X-Squid-Error: ERR_SHUTTING_DOWN.
func ownError(a *attempt) bool {
	resp := &a.resp
	if a.status < 500 || a.hop.Peer == nil || a.hop.Peer.Type() != peers.Parent {
		return false
	}
	switch upstreamError(resp.Fields) {
	case "proxy_internal_error", "proxy_configuration_error", "proxy_internal_response":
		return true
	}
	if v := resp.Get("X-Squid-Error"); len(v) >= 16 && string(v[:16]) == "ERR_SHUTTING_DOWN" {
		return true
	}
	return false
}

// judge reports how a parent answered a request written to it whole: an
// answer failure (closed, reset, timeout, own_5xx; late is judged by the
// hedge) or a complete answer, which resets its count. What is not the
// parent's doing — a stale pooled connection, a client that left, an
// answer the parent gave about its own next hop — is neither.
func (tx *txn) judge(a *attempt, class failure) {
	pe := a.hop.Peer
	if pe == nil || pe.Type() != peers.Parent || tx.clientGone || a.clientBody {
		return
	}
	if a.progress < headWritten || (tx.bodyState != noBody && a.progress < bodyWritten && !a.final) {
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
	tx.cc.p.acct.ObserveAnswer(pe, c, a.firstByte, at)
}

// lateAt is when a's head is late (zero: never): after the parent's
// first_byte_timeout, for a request that may be hedged or judged.
func (tx *txn) lateAt(a *attempt) (at time.Time, hedge bool) {
	pe := a.hop.Peer
	if pe == nil || a.writtenAt.IsZero() {
		return time.Time{}, false
	}
	t, h := tx.cc.p.acct.FirstByte(pe)
	if t <= 0 {
		return time.Time{}, false
	}
	return a.writtenAt.Add(t), h && tx.mayHedge()
}

// mayHedge: an idempotent request whose body (if any) is buffered whole,
// with no upgrade, while the plan has a hop left and the retry budget
// allows one more.
func (tx *txn) mayHedge() bool {
	return tx.facts.retriable() && tx.bodyState != streaming && len(tx.body.Trailer) == 0 &&
		tx.upgrade == nil && !tx.facts.tunnel
}

// headResult is how one of the two racing attempts' head came out: the
// original's, read beside the race, or the hedge's, which is an attempt of
// its own (sendAlone).
type headResult struct {
	hedge     *attempt // nil: the original's
	head      []byte
	err       error
	gotBytes  bool
	firstByte time.Duration
}

// hedgeSlot holds the hedge's connection so the race can abandon it.
type hedgeSlot struct {
	mu        sync.Mutex
	conn      *upConn
	abandoned bool
}

func (s *hedgeSlot) set(c *upConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.abandoned {
		c.close()
		return false
	}
	s.conn = c
	return true
}

func (s *hedgeSlot) abandon() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.abandoned = true
	if s.conn != nil {
		s.conn.close()
	}
}

// hedge sends the request to the plan's next hop too, while a (whose
// head is late) goes on waiting, and waits for the first final head of
// either until deadline. It reports false when no hedge could be sent (no
// hop left, or no budget): a waits on as before. Otherwise a ends holding
// the winner (its hop, connection and head, parsed into a.resp) or, when
// both failed, the original's failure; the loser's connection is closed,
// never reused. The original is late — an answer failure — only when the
// hedge's head came first and fast (within that hop's own first-byte
// timeout): a slow origin behind both is no parent's fault.
func (tx *txn) hedge(a *attempt, deadline time.Time) bool {
	p := tx.cc.p
	if !p.budget.available() {
		return false
	}
	h, ok := tx.plan.Next()
	if !ok {
		return false
	}
	h, uc, ok := tx.take(h, &tx.plan, true)
	if !ok {
		return false
	}
	if !p.budget.withdraw() {
		tx.releaseHop(h, uc)
		p.metrics.budgetExhausted()
		return false
	}
	a.hop.Peer.NoteHedged()
	p.metrics.hedgeRequest()
	req := append([]byte(nil), tx.requestHead(h)...)
	if tx.bodyState == buffered {
		req = append(req, tx.buf...)
	}
	results := make(chan headResult, 2)
	slot := &hedgeSlot{}
	o, pl, maxHeader := tx.originFor(h), tx.poolFor(h), tx.cfg.maxHeader
	// The second attempt of the request, in flight beside the first. It
	// holds h's in-flight slot (taken above) and owns its connection.
	second := &attempt{hop: h, progress: planned, conn: uc, reused: uc != nil, begun: h.Peer != nil}
	go func() {
		second.sendAlone(p, o, pl, req, maxHeader, deadline, slot)
		results <- headResult{hedge: second, head: second.head, err: second.err, gotBytes: second.gotBytes, firstByte: second.firstByte}
	}()
	c := a.conn
	c.dl.setRead(deadline)
	go func() {
		head, gotBytes, err := readFinalHead(c, maxHeader)
		results <- headResult{head: head, err: err, gotBytes: gotBytes}
	}()
	w := tx.cc.watch(nil)
	defer w.stop()
	var orig, other *headResult
	for orig == nil || other == nil {
		select {
		case r := <-results:
			if r.hedge != nil {
				other = &r
			} else {
				orig = &r
				if r.err == nil {
					a.headAt = time.Now()
					r.firstByte = a.headAt.Sub(a.writtenAt)
				}
			}
			if r.err == nil {
				return tx.raceWon(a, &r, h, slot)
			}
		case <-w.left:
			slot.abandon()
			tx.releaseHop(h, nil)
			a.err = errClientGone
			return true
		}
	}
	// Both failed: the original's failure stands; the hedge's hop is
	// released (its connect failure, if that was it, is counted).
	tx.releaseHop(h, nil)
	a.err, a.gotBytes = orig.err, orig.gotBytes
	a.timedOut = isTimeout(orig.err) && !orig.gotBytes
	return true
}

// raceWon settles a race: the winner's head becomes a's answer.
func (tx *txn) raceWon(a *attempt, r *headResult, h selection.Hop, slot *hedgeSlot) bool {
	p := tx.cc.p
	if r.hedge == nil {
		slot.abandon()
		tx.releaseHop(h, nil)
		a.firstByte = r.firstByte
		return a.takeHead(r.head)
	}
	// The hedge was first: the original is abandoned.
	if fbt, _ := p.acct.FirstByte(h.Peer); h.Peer == nil || fbt <= 0 || r.firstByte <= fbt {
		p.acct.ObserveAnswer(a.hop.Peer, peers.AnswerLate, 0, time.Now())
	}
	a.conn.close()
	if a.begun {
		p.acct.EndRequest(a.hop.Peer)
	}
	w := r.hedge
	a.restart(attempt{tx: tx, hop: w.hop, progress: w.progress, conn: w.conn, reused: w.reused, begun: w.begun,
		firstByte: w.firstByte, writtenAt: w.writtenAt, headAt: w.headAt})
	if h.Peer != nil {
		p.acct.ObserveAnswer(h.Peer, peers.AnswerOK, r.firstByte, a.headAt)
	}
	return a.takeHead(r.head)
}

// takeHead parses a won final head into a.resp.
func (a *attempt) takeHead(head []byte) bool {
	a.gotBytes = true
	if err := h1.ParseResponse(head, &a.resp); err != nil {
		a.err = err
		return true
	}
	a.final, a.status, a.head, a.progress = true, a.resp.Status, head, responseHead
	return true
}

// releaseHop gives back a hop's in-flight slot (and an unused idle
// connection to it).
func (tx *txn) releaseHop(h selection.Hop, uc *upConn) {
	if uc != nil {
		uc.close()
	}
	if h.Peer != nil {
		tx.cc.p.acct.EndRequest(h.Peer)
	}
}

// sendAlone is a hedge's attempt: it connects (or uses the idle
// connection it was given), writes req (the request head and buffered
// body, built before it started) and reads the final head, skipping
// interim answers. It runs beside the transaction and touches none of it;
// its outcome is in a (conn, progress, head, err, gotBytes, firstByte).
// A failed attempt's connection is closed.
func (a *attempt) sendAlone(p *Proxy, o origin, pl *pool, req []byte, maxHeader int, deadline time.Time, slot *hedgeSlot) {
	if a.conn == nil {
		a.progress = dialling
		nc, err := p.dialHop(a.hop, o)
		if err != nil {
			a.err = err
			return
		}
		a.conn = newUpConn(nc, pl)
	}
	a.progress = connected
	uc := a.conn
	if !slot.set(uc) {
		a.conn, a.err = nil, errHedgeAbandoned
		return
	}
	uc.nc.SetDeadline(deadline)
	a.writtenAt = time.Now()
	if _, err := uc.nc.Write(req); err != nil {
		uc.close()
		a.conn, a.err = nil, err
		return
	}
	a.progress = headWritten
	head, gotBytes, err := readFinalHead(uc, maxHeader)
	a.gotBytes = gotBytes
	if err != nil {
		uc.close()
		a.conn, a.err = nil, err
		return
	}
	uc.nc.SetWriteDeadline(time.Time{})
	uc.dl = deadlines{nc: uc.nc}
	uc.dl.setRead(time.Time{})
	a.headAt = time.Now()
	a.head, a.firstByte, a.progress = head, a.headAt.Sub(a.writtenAt), responseHead
}

var errHedgeAbandoned = errors.New("hedge abandoned: the other attempt answered first")

// readFinalHead reads heads until a final one; interim answers are
// dropped (a hedged request relays none: the race is decided on final
// heads).
func readFinalHead(c *upConn, maxHeader int) (head []byte, gotBytes bool, err error) {
	var resp h1.Response
	for interim := 0; interim <= 8; interim++ {
		head, err = c.r.ReadHead(maxHeader)
		if err != nil {
			return nil, c.r.Buffered() > 0 || err == h1.ErrHeadTooLarge, err
		}
		if err := h1.ParseResponse(head, &resp); err != nil {
			return nil, true, err
		}
		if resp.Status >= 200 {
			return head, true, nil
		}
		if resp.Status == http.StatusSwitchingProtocols {
			return nil, true, errUnexpected101
		}
		c.r.Release(head)
	}
	return nil, true, errTooManyInterim
}
