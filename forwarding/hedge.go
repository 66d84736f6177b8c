package forwarding

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/peerd/peerd/selection"
)

// Hedged connects: when the connect to the chosen hop is still pending
// after the hedge delay, the next hop of the plan is started in parallel
// and the first attempt to obtain a connection carries the request. The
// race is decided in httptrace's GotConn hook, which runs before anything
// is written; the loser's hopConn refuses every write, so a request is
// never sent twice. The loser's connect is not abandoned: net/http keeps
// dialing for its pool, and the dialer reports the outcome (a slow connect
// still ends as a success or a connect failure, counted as such).

var errHedgeLost = errors.New("peerd: hedged connect lost the race; nothing written")

// arbiter picks the first attempt that obtains a connection.
type arbiter struct {
	winner atomic.Pointer[attempt]
}

func (r *arbiter) claim(a *attempt) bool {
	return r.winner.CompareAndSwap(nil, a) || r.winner.Load() == a
}

func (r *arbiter) decided() bool { return r.winner.Load() != nil }

// hedgeDelay is how long a connect to hop may pend before the next hop is
// tried in parallel; 0 turns hedging off. "auto" is max(50ms, 4 x the
// peer's smoothed connect time), never above its connect timeout.
func (p *Proxy) hedgeDelay(hop selection.Hop) time.Duration {
	c := p.config().ConnectHedgeDelay
	if !c.Auto {
		return c.Delay
	}
	if hop.Peer == nil {
		return 0
	}
	d := max(50*time.Millisecond, 4*hop.Peer.ConnectTime())
	return min(d, hop.Peer.ConnectTimeout())
}

// tryResult is the outcome of one attempt.
type tryResult struct {
	resp *http.Response
	a    *attempt
	err  error
	full bool // the peer was at max_conn: skipped, nothing tried
}

// attemptHop sends the request to hop, hedging its connect with the next
// hop of the plan when it is slow. It returns the attempt that matters:
// the one that got a connection, or the last failure when none did.
func (p *Proxy) attemptHop(in *http.Request, hop selection.Hop, plan *selection.Plan, b *body, retriable bool) tryResult {
	delay := p.hedgeDelay(hop)
	// A streaming body may be read by a loser before its first write, so
	// only replayable requests are hedged.
	if delay <= 0 || !b.replayable {
		return p.try(newAttempt(in.Context(), hop, nil), in, b, retriable)
	}
	arb := &arbiter{}
	first := newAttempt(in.Context(), hop, arb)
	results := make(chan tryResult, 2)
	go func() { results <- p.try(first, in, b, retriable) }()
	timer := time.NewTimer(delay)
	select {
	case r := <-results:
		timer.Stop()
		return r
	case <-timer.C:
	}
	if arb.decided() {
		return <-results // connected; only the answer is slow
	}
	if hop.Peer != nil {
		p.acct.MarkSlow(hop.Peer)
	}
	next, ok := plan.Next()
	if !ok {
		return <-results
	}
	p.metrics.hedge()
	second := newAttempt(in.Context(), next, arb)
	go func() { results <- p.try(second, in, b, retriable) }()

	var failed tryResult
	for pending := 2; pending > 0; pending-- {
		r := <-results
		if r.full {
			continue
		}
		if w := arb.winner.Load(); w == r.a {
			other := first
			if r.a == first {
				other = second
			}
			other.cancel()
			if pending == 2 {
				go func() { release(<-results) }()
			}
			return r
		}
		if r.a.lost.Load() || arb.decided() {
			release(r) // the loser
			continue
		}
		failed = r // failed before any connection; the other may win
	}
	if failed.a == nil {
		// Both attempts were skipped (full) or lost: nothing was sent.
		return tryResult{a: first, full: true}
	}
	return failed
}

// release frees a result nobody will use.
func release(r tryResult) {
	if r.resp != nil {
		discard(r.resp)
	}
}

func newAttempt(parent context.Context, hop selection.Hop, arb *arbiter) *attempt {
	ctx, cancel := context.WithCancel(parent)
	return &attempt{hop: hop, arbiter: arb, ctx: ctx, cancel: cancel}
}
