package forwarding

// This file holds how the walker judges a parent by its answers
// (contract section 16): the answer-failure class of an attempt and a
// parent's own 5xx (a late head is judged by the hedge, race.go).

import (
	"errors"
	"syscall"
	"time"

	"github.com/peerd/peerd/peers"
)

// ownError reports a final 5xx a parent blames on itself: the last
// Proxy-Status member (the parent's own) with proxy_internal_error,
// proxy_configuration_error or proxy_internal_response, or Squid's
// X-Squid-Error: ERR_SHUTTING_DOWN. A key's owner (a peerd) marks an
// error or refusal of its own, 4xx or 5xx, with X-Peerd-Error.
func ownError(a *attempt) bool {
	resp := &a.resp
	if a.hop.Leads() {
		return a.status >= 400 && resp.Get("X-Peerd-Error") != nil
	}
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

// judge reports how a parent, or a key's owner, answered a request
// written to it whole: an answer failure (closed, reset, timeout,
// own_5xx; late is judged by the hedge) or a complete answer, which
// resets its count. What is not the hop's doing — a stale pooled
// connection, a client that left, an answer the parent gave about its
// own next hop — is neither. An answer is about its origin (its host's
// hash), an owner's about its key.
func (w *walker) judge(a *attempt, class failure) {
	pe := a.hop.Peer
	if pe == nil || pe.Type() != peers.Parent && !a.hop.Leads() || w.cw.gone || a.clientBody {
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
	about := w.rq.req.Host
	if a.hop.Leads() {
		about = a.hop.Key
	}
	w.h.acct.Observe(pe, peers.Outcome{Event: peers.Answered, Class: c, FirstByte: fb, At: at, Origin: peers.OriginHash(about)})
}
