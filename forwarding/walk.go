package forwarding

// This file holds the walker: the one forward loop over a request's
// plan. It is the only part that advances the plan, and it owns every
// attempt in flight: it takes each hop (skipping a full peer), gets a
// connection (an idle one, a connect, or a race of connects: race.go),
// has the attempt make its round trip, blames a failure on the hop or
// the origin, and after each step asks decide (attempt.go) what follows — the next hop, the same hop fresh, a hedge
// when the head is late, or the answer. It knows nothing of the
// transaction: it gets the request and the client side, and returns the
// attempt to answer with.

import (
	"errors"
	"net/http"
	"time"

	"github.com/peerd/peerd/access"
	"github.com/peerd/peerd/internal/h1"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
)

// walker walks one request's plan.
type walker struct {
	h    *hops // the request's generation's (begin)
	rq   *request
	side clientSide
	cw   *clientWriter // read for whether the client is gone
	plan selection.Plan
	a    attempt // the attempt in progress (its buffers are reused)
	// lastErr is the error the client gets if no hop answers; denied a
	// destination the policy refused on the way, which outranks it.
	lastErr, denied *Error
	origin          origin
	oKey            []byte // the DIRECT pool key, scheme://host:port
}

// init binds the walker to its request, the client side interim
// answers go to, and the client writer it reads for a client gone.
func (w *walker) init(rq *request, side clientSide, cw *clientWriter) {
	w.rq, w.side, w.cw = rq, side, cw
}

// begin starts a walk over plan.
func (w *walker) begin(plan selection.Plan) {
	w.h = &w.rq.gen.hops
	w.plan, w.lastErr, w.denied, w.origin, w.oKey = plan, nil, nil, origin{}, w.oKey[:0]
}

// walk runs attempts along the plan until decide says to answer, and
// returns the attempt to answer with: a response head read, a CONNECT
// reply (or a DIRECT tunnel's connection), or a failure that is the
// client's answer. nil when no hop answered and none is left (finalError
// says why), or when the client went away. Each attempt connects, makes
// its round trip, is classed, and decide says what follows.
func (w *walker) walk() *attempt {
	hop, ok := w.plan.Next()
	pooled := true // the next attempt may ride an idle connection
	for ok {
		a := w.connect(hop, pooled)
		if a == nil {
			return nil // every hop left failed to connect
		}
		if w.rq.facts.tunnel && a.hop.Peer == nil {
			return a // DIRECT: the tunnel starts on the connection
		}
		w.exchange(a)
		if w.cw.gone {
			a.release()
			return nil
		}
		class := w.classify(a)
		var v verdict
		hop, v = w.onward(class, step{lead: a.hop.Lead, budget: w.h.budget, left: &w.plan})
		switch v {
		case nextHop, retry, sameFresh:
			if class != siblingMissed {
				w.h.metrics.retry(class.String())
			}
			a.release()
			if pooled = v != sameFresh; !pooled {
				hop = a.hop
			}
			continue
		case none:
			a.release()
			return nil
		}
		w.answered(a)
		return a
	}
	return nil
}

// onward asks decide what follows a step of class c and, when it is the
// plan's next hop, takes it: a retry spends the retry budget, and one
// that finds it spent meanwhile is put to decide again with the budget
// spent.
func (w *walker) onward(c failure, s step) (selection.Hop, verdict) {
	v := decide(c, w.rq.facts, s)
	if v == retry && !w.h.budget.withdraw() {
		w.h.metrics.budgetExhausted()
		s.budget = granted(false)
		v = decide(c, w.rq.facts, s)
	}
	if v != nextHop && v != retry {
		return selection.Hop{}, v
	}
	next, _ := w.plan.Next() // there is one: decide looked (step.left)
	return next, v
}

// exchange has a make its round trip (or ask its parent for a tunnel),
// waiting on a late head as decide says: hedged to the next hop, or
// waited on with the late parent suspect meanwhile, or simply waited on.
func (w *walker) exchange(a *attempt) {
	if w.rq.facts.tunnel {
		a.connectVia(w.rq, w.side)
		return
	}
	fbt := w.firstByte(a)
	a.roundTrip(w.rq, w.side, fbt)
	for a.late && !w.cw.gone {
		s := step{budget: granted(w.hedgeAllowed(a)), left: &w.plan}
		v := decide(lateHead, w.rq.facts, s)
		if v == hedge {
			sent, refused := w.hedge(a)
			if sent {
				continue
			}
			// Not sent: another request took the last of the budget,
			// or no healthy hop could be taken after all.
			s.budget = granted(!refused)
			if !refused {
				s.left = nothingLeft{}
			}
			v = decide(lateHead, w.rq.facts, s)
		}
		if v == waitSuspect {
			// The late parent gets no new requests meanwhile, and the
			// wait is hedged after all once the parent fails an answer
			// elsewhere (unbudgeted).
			w.h.acct.Observe(a.hop.Peer, peers.Outcome{Event: peers.HeadLate, FirstByte: fbt, At: time.Now()})
			a.refused = w.h.health.HedgeBudget() > 0
		}
		a.await(w.rq, w.side)
	}
	w.readWhole(a)
}

// nothingLeft is a plan with no hop left.
type nothingLeft struct{}

func (nothingLeft) Left(bool) bool { return false }

// hedgeAllowed reports whether a's late head may be hedged now: always
// away from a parent already failing its answers (unbudgeted), else when
// hedge_budget allows it; a refusal is counted.
func (w *walker) hedgeAllowed(a *attempt) bool {
	budget := w.h.health.HedgeBudget()
	if budget > 0 && unbudgeted(a.hop) || w.h.hedges.left(budget, time.Now()) > 0 {
		return true
	}
	w.h.metrics.hedgeRefused()
	return false
}

// unbudgeted reports whether a late head at hop is hedged outside
// hedge_budget: its parent's latest answer failed already (it is suspect
// by its answers). The budget bounds what a tail of slow answers costs
// the other parents; a parent that has stopped answering is no tail, and
// the requests still waiting on it are moved at once, which also counts
// its failures towards answer_fail_limit without waiting for budget.
func unbudgeted(hop selection.Hop) bool {
	return hop.Peer != nil && hop.Peer.Health().AnswerFailures() > 0 && hop.Peer.Type() == peers.Parent
}

// firstByte is the first-byte timeout a's round trip returns at when
// its head is late (0: it waits on): the peer's, when the peer hedges
// and the request may be hedged.
func (w *walker) firstByte(a *attempt) (fbt time.Duration) {
	if a.hop.Peer == nil || !w.rq.facts.hedgeable {
		return 0
	}
	t, on := w.h.health.FirstByte(a.hop.Peer)
	if !on {
		return 0
	}
	return t
}

// take returns the next hop of the plan that is not at max_conn and
// that the request may connect to (decide skips a full peer, and a
// suspect one a connect may hang on, Peer.BeginDial: nothing is sent,
// nothing failed), with its in-flight slot taken, and an idle connection
// to it when the request may ride one; without one, the connect is
// claimed (dialHop ends the claim).
func (w *walker) take(hop selection.Hop, pooled bool) (selection.Hop, *upConn, bool) {
	h := w.h
	for {
		for hop.Peer != nil && !h.acct.BeginRequest(hop.Peer, w.rq.start) {
			var ok bool
			if hop, ok = w.skip(); !ok {
				return hop, nil, false
			}
			pooled = true
		}
		if pooled && w.rq.facts.retriable() {
			uc, extra := w.poolFor(hop).get(w.rq.start, w.rq.gen.cfg.PconnTimeout)
			if extra > 0 {
				h.unsolicited(hop, extra)
			}
			if uc != nil {
				return hop, uc, true
			}
		}
		if hop.Peer == nil || hop.Peer.Health().BeginDial() {
			return hop, nil, true
		}
		h.acct.EndRequest(hop.Peer)
		var ok bool
		if hop, ok = w.skip(); !ok {
			return hop, nil, false
		}
		pooled = true
	}
}

// skip moves past a hop that was skipped (nothing sent): the plan's next
// hop when decide allows one.
func (w *walker) skip() (selection.Hop, bool) {
	hop, v := w.onward(peerFull, step{budget: granted(false), left: &w.plan})
	return hop, v == nextHop
}

// connect returns an attempt with a connection, starting at hop and moving
// along the plan past hops that fail to connect; nil when none is left.
// pooled=false forces a new connection to the first hop (after a stale
// pooled one).
func (w *walker) connect(hop selection.Hop, pooled bool) *attempt {
	h := w.h
	for {
		var uc *upConn
		var ok bool
		hop, uc, ok = w.take(hop, pooled)
		if !ok {
			return nil
		}
		if uc != nil {
			return w.attemptOn(hop, uc, true)
		}
		if delay := h.hedgeDelay(w.rq.gen, hop); delay > 0 && !hop.Lead {
			// (A lead hop is no plan hop to race: the plan's own follow
			// it only when it fails.)
			return w.raceConnects(hop, delay)
		}
		nc, err := h.dialHop(hop, w.originFor(hop), w.rq.gen)
		if err == nil {
			return w.attemptOn(hop, newUpConn(nc, w.poolFor(hop)), false)
		}
		var v verdict
		if hop, v = w.dialFailed(hop, err); v != nextHop {
			return nil
		}
		h.metrics.retry(connectFailed.String())
		pooled = true
	}
}

// attemptOn starts the walk's attempt at hop on uc.
func (w *walker) attemptOn(hop selection.Hop, uc *upConn, reused bool) *attempt {
	a := &w.a
	a.restart(w.newAttempt(hop, connected, uc, reused))
	return a
}

// newAttempt is an attempt of this request at hop, its slot there held.
func (w *walker) newAttempt(hop selection.Hop, at progress, uc *upConn, reused bool) attempt {
	return attempt{h: w.h, hop: hop, role: roleOf(hop), progress: at, reused: reused, conn: uc, begun: hop.Peer != nil,
		tunnel: w.rq.facts.tunnel, headReq: w.rq.method == http.MethodHead}
}

// dialFailed records a failed connect, frees its slot, and says what
// follows (decide: the next hop, taken, when there is one).
func (w *walker) dialFailed(hop selection.Hop, err error) (selection.Hop, verdict) {
	return w.onward(w.noteDialFailure(hop, err), step{budget: granted(false), left: &w.plan})
}

// noteDialFailure records a failed connect and frees its slot; it
// returns the step's class.
func (w *walker) noteDialFailure(hop selection.Hop, err error) failure {
	a := attempt{hop: hop, progress: dialling, err: err}
	class := a.class(false)
	w.noteFailure(&a, class)
	if hop.Peer != nil {
		w.h.acct.EndRequest(hop.Peer)
	}
	return class
}

// finalError is the error the client gets when no hop answered.
func (w *walker) finalError() *Error {
	if w.denied != nil {
		return w.denied
	}
	return w.lastErr
}

// noteFailure keeps the error the client gets if nothing better follows.
func (w *walker) noteFailure(a *attempt, class failure) {
	if a.err == nil {
		return // an answer, good or bad: nothing to keep
	}
	peer := hopName(a.hop)
	var denied *access.Denied
	if errors.As(a.err, &denied) {
		w.denied = errorf(http.StatusForbidden, CodeDenied, "", "%v", denied)
		return
	}
	prev := w.lastErr
	switch class {
	case connectFailed:
		if outOfFiles(a.err) {
			w.h.metrics.files.hit("connect", a.err, w.h.log)
			w.lastErr = errorf(http.StatusServiceUnavailable, CodeConnectFailed, "", "peerd is out of file descriptors (%v): not %s's fault", a.err, peer)
			return
		}
		w.lastErr = errorf(http.StatusBadGateway, CodeConnectFailed, peer, "%w", a.err)
	case beforeWrite, staleConn:
		if w.lastErr == nil || w.lastErr.Code != CodeConnectFailed {
			w.lastErr = errorf(http.StatusBadGateway, CodeBadGateway, peer, "%w", a.err)
		}
	case timedOut:
		w.lastErr = errorf(http.StatusGatewayTimeout, CodeTimeout, peer, "no response within read_timeout (%s)", w.rq.gen.cfg.ReadTimeout)
	case givenUp:
		w.lastErr = errorf(http.StatusGatewayTimeout, CodeTimeout, peer, "%w", a.err)
	case afterWrite:
		w.lastErr = errorf(http.StatusBadGateway, CodeBadGateway, peer, "%w", a.err)
	}
	if w.lastErr != prev {
		w.lastErr.hop, w.lastErr.hopSet = a.hop, true
	}
}

func hopName(h selection.Hop) string {
	if h.Peer == nil {
		return ""
	}
	return h.Peer.Name()
}

// originFor is where DIRECT goes for this request (the zero origin for a
// peer).
func (w *walker) originFor(hop selection.Hop) origin {
	if hop.Peer != nil {
		return origin{}
	}
	if w.origin.host == "" {
		req := &w.rq.req
		w.origin = origin{host: string(req.Host), port: uint16(w.rq.port), tls: w.rq.https()}
	}
	return w.origin
}

// poolFor is the idle list of a hop for this request.
func (w *walker) poolFor(hop selection.Hop) *pool {
	pl := w.h.pools
	if hop.Peer != nil {
		return pl.forPeer(hop.Peer)
	}
	if len(w.oKey) == 0 {
		req := &w.rq.req
		if req.Form == h1.AbsoluteForm {
			w.oKey = append(w.oKey, req.Scheme...)
		}
		w.oKey = append(w.oKey, "://"...)
		w.oKey = append(w.oKey, req.Host...)
		w.oKey = append(append(w.oKey, ':'), req.Port...)
	}
	return pl.forOrigin(w.oKey)
}
