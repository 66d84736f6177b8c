package forwarding

// This file holds the one forward loop: attempts along the plan, plain
// requests and CONNECT alike, each followed by decide (attempt.go), and
// the error kept for the client when no hop answers.

import (
	"errors"
	"net/http"

	"github.com/peerd/peerd/access"
	"github.com/peerd/peerd/selection"
)

// walk runs attempts along tx.plan until decide says to answer, and
// returns the attempt to answer with: a response head read, a CONNECT
// reply (or a DIRECT tunnel's connection), or a failure that is the
// client's answer. nil when no hop is left (tx.finalError says why), or
// when the client went away (tx.clientGone). Connect failures are decided
// inside connect, which moves along the plan (and races hops when hedged);
// every other step is decided here.
func (tx *txn) walk() *attempt {
	p := tx.cc.p
	c := tx.cfg
	plan := &tx.plan // kept in the txn: a hedge takes its next hop from it
	hop, ok := plan.Next()
	pooled := true // the next attempt may ride an idle connection
	for ok {
		a := tx.connect(hop, plan, pooled)
		pooled = true
		if a == nil {
			return nil // every hop left failed to connect
		}
		retry := false
		switch {
		case tx.facts.tunnel && a.hop.Peer == nil:
			return a // DIRECT: the tunnel starts on the connection
		case tx.facts.tunnel:
			a.connectVia()
		default:
			a.exchange()
		}
		if tx.clientGone {
			a.release()
			return nil
		}
		if !tx.facts.tunnel {
			a.own = a.final && ownError(a)
			retry = tx.blame(a, c.retryStatus[a.status])
		}
		class := a.class(retry)
		if !tx.facts.tunnel {
			tx.judge(a, class)
		}
		tx.noteFailure(a, class)
		costs := costsBudget(class, tx.facts)
		switch decide(class, tx.facts, costs && p.budget.available()) {
		case nextHop:
			next, more := plan.Next()
			if more && costs && !p.budget.withdraw() {
				p.metrics.budgetExhausted()
				more = false
			}
			if more {
				if class != siblingMissed {
					p.metrics.retry(class.String())
				}
				a.release()
				hop = next
				continue
			}
			if class == siblingMissed {
				// A miss is no answer: with nothing after it the client
				// gets the error of no next hop, never the sibling's 504.
				a.release()
				return nil
			}
		case sameFresh:
			p.metrics.retry(class.String())
			a.release()
			hop, pooled = a.hop, false
			continue
		}
		return a
	}
	return nil
}

// finalError is the error the client gets when no hop answered.
func (tx *txn) finalError() *Error {
	if tx.denied != nil {
		return tx.denied
	}
	return tx.lastErr
}

// noteFailure keeps the error the client gets if nothing better follows.
func (tx *txn) noteFailure(a *attempt, class failure) {
	if a.err == nil {
		return // an answer, good or bad: nothing to keep
	}
	peer := hopName(a.hop)
	var denied *access.Denied
	if errors.As(a.err, &denied) {
		tx.denied = errorf(http.StatusForbidden, CodeDenied, "", "%v", denied)
		return
	}
	prev := tx.lastErr
	switch class {
	case connectFailed:
		tx.lastErr = errorf(http.StatusBadGateway, CodeConnectFailed, peer, "%w", a.err)
	case beforeWrite, staleConn:
		if tx.lastErr == nil || tx.lastErr.Code != CodeConnectFailed {
			tx.lastErr = errorf(http.StatusBadGateway, CodeBadGateway, peer, "%w", a.err)
		}
	case timedOut:
		tx.lastErr = errorf(http.StatusGatewayTimeout, CodeTimeout, peer, "no response within read_timeout (%s)", tx.cfg.ReadTimeout)
	case afterWrite:
		tx.lastErr = errorf(http.StatusBadGateway, CodeBadGateway, peer, "%w", a.err)
	}
	if tx.lastErr != prev {
		tx.lastErr.hop, tx.lastErr.hopSet = a.hop, true
	}
}

func hopName(h selection.Hop) string {
	if h.Peer == nil {
		return ""
	}
	return h.Peer.Name()
}
