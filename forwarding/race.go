package forwarding

// This file holds the race: the attempts of one request in flight at
// once, which the walker owns. Two things race. A connect still pending
// after its hedge delay has the plan's next hop dialled beside it (and
// the one after, every hedge delay); the first connection carries the
// request, and nothing is written before one is won, so a request is
// never sent twice. A request whose head is late goes to the next hop
// too (a hedge), and the first final head wins. Both run their attempts
// through one race: each racer reports its attempt on one channel when
// its step ends, and whatever reports after the race is over is disposed
// of in one place (an unused connection pooled, a used one closed, the
// peer's in-flight slot freed).

import (
	"errors"
	"sync"
	"time"

	"github.com/peerd/peerd/internal/h1"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
)

// race is one request's racing attempts.
type race struct {
	w *walker
	// h is the walk's hops, taken when the race starts: its racers may
	// outlive the walk, and the walker's field is the next request's.
	h       *hops
	results chan *attempt
	pending int
	mu      sync.Mutex // guards over and the racers' connections
	over    bool       // a winner was taken, or the request gave up
	sending []*attempt // hedges under way (their connections close when the race ends)
}

// maxRacing bounds the attempts one request has pending at once.
const maxRacing = 8

var errHedgeAbandoned = errors.New("hedge abandoned: the other attempt answered first")

func (w *walker) newRace() *race { return &race{w: w, h: w.h, results: make(chan *attempt, maxRacing)} }

// dial starts a connect to hop (its slot taken); the attempt comes back
// connected, or failed at dialling.
func (r *race) dial(hop selection.Hop) {
	w := r.w
	a := w.newAttempt(hop, dialling, nil, false)
	o, pl, g := w.originFor(hop), w.poolFor(hop), w.rq.gen
	r.pending++
	go func() {
		nc, err := r.h.dialHop(hop, o, g)
		if err != nil {
			a.err = err
		} else {
			a.conn, a.progress = newUpConn(nc, pl), connected
		}
		r.report(&a)
	}()
}

// send starts a hedge at hop (its slot taken; uc an idle connection to
// it, or nil to dial): it connects, writes the request and reads the
// final head, dropping interim answers. It comes back with a head, or
// failed.
func (r *race) send(hop selection.Hop, uc *upConn) {
	w := r.w
	a := w.newAttempt(hop, planned, uc, uc != nil)
	o, pl, rq, g := w.originFor(hop), w.poolFor(hop), w.rq, w.rq.gen
	r.pending++
	r.mu.Lock()
	r.sending = append(r.sending, &a)
	r.mu.Unlock()
	go func() {
		if uc == nil {
			a.progress = dialling
			nc, err := r.h.dialHop(hop, o, g)
			if err != nil {
				a.err = err
				r.report(&a)
				return
			}
			uc = newUpConn(nc, pl)
		}
		r.mu.Lock()
		if r.over {
			r.mu.Unlock()
			uc.close()
			a.err = errHedgeAbandoned
			r.report(&a)
			return
		}
		a.conn, a.progress = uc, connected
		r.mu.Unlock()
		a.roundTrip(rq, nil, 0)
		r.report(&a)
	}()
}

// report hands a racer's attempt to the walker, or, when the race is
// over, disposes of it.
func (r *race) report(a *attempt) {
	r.mu.Lock()
	if !r.over {
		r.results <- a // never blocks: at most maxRacing are pending
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	r.dispose(a)
}

// dispose ends an attempt the race no longer needs: a connection that
// carried nothing goes to its hop's idle list, any other is closed, and
// the hop's in-flight slot is freed.
func (r *race) dispose(a *attempt) {
	if a.conn != nil {
		if a.progress == connected && a.err == nil {
			a.conn.pool.put(a.conn, time.Now())
		} else {
			a.conn.close()
		}
		a.conn = nil
	}
	if a.begun {
		r.h.acct.EndRequest(a.hop.Peer)
		a.begun = false
	}
}

// finish ends the race: hedges still under way are cut (their
// connections closed), racers still pending dispose of themselves, and
// those that reported already are disposed of here. won, when not nil, is
// the racer that won: its connection now carries the answer to the client
// and is never touched here.
func (r *race) finish(won *attempt) {
	r.mu.Lock()
	r.over = true
	for _, a := range r.sending {
		if a != won && a.conn != nil {
			a.conn.close() // its round trip ends; it reports, and is disposed
		}
	}
	r.mu.Unlock()
	for {
		select {
		case a := <-r.results:
			r.dispose(a)
		default:
			return
		}
	}
}

// raceConnects dials hop and, every hedge delay while no connection has
// arrived, the next hop of the plan too; the first connection wins.
func (w *walker) raceConnects(hop selection.Hop, delay time.Duration) *attempt {
	wh := w.h
	r := w.newRace()
	latest := hop
	due := wh.stalls.Deadline(time.Now(), delay) // the hedge delay's end
	r.dial(hop)
	timer := time.NewTimer(delay)
	defer timer.Stop()
	// join takes h into the race: an idle connection to it ends the
	// race at once; otherwise it is dialled.
	join := func(h selection.Hop) (*attempt, bool) {
		h, uc, ok := w.take(h, true)
		if !ok {
			return nil, false
		}
		if uc != nil {
			r.finish(nil)
			return w.attemptOn(h, uc, true), true
		}
		d := wh.hedgeDelay(w.rq.gen, h)
		latest, due = h, wh.stalls.Deadline(time.Now(), d)
		r.dial(h)
		timer.Reset(d)
		return nil, true
	}
	for {
		select {
		case a := <-r.results:
			r.pending--
			if a.err == nil {
				r.finish(nil)
				return w.attemptOn(a.hop, a.conn, false)
			}
			class := w.noteDialFailure(a.hop, a.err)
			if r.pending > 0 {
				continue // the others race on
			}
			h, v := w.onward(class, step{budget: granted(false), left: &w.plan})
			if v != nextHop {
				r.finish(nil)
				return nil
			}
			wh.metrics.retry(connectFailed.String())
			won, ok := join(h)
			if won != nil {
				return won
			}
			if !ok {
				r.finish(nil)
				return nil
			}
		case <-timer.C:
			if left := due.Left(time.Now()); left > 0 {
				// peerd itself was stalled meanwhile (stall_guard): the
				// delay stretches by it before anyone is called slow.
				timer.Reset(left)
				continue
			}
			if latest.Peer != nil {
				wh.acct.Observe(latest.Peer, peers.Outcome{Event: peers.ConnectSlow, At: time.Now()})
			}
			if r.pending >= maxRacing {
				continue
			}
			wh.metrics.hedge()
			if h, ok := w.plan.NextHealthy(); ok { // a race is run with healthy hops only
				if won, _ := join(h); won != nil {
					return won
				}
			}
		}
	}
}

// hedge sends the request to the plan's next hop too, while a (whose
// head is late) goes on waiting, and waits for the first final head of
// either. It reports sent false when no hedge could be sent (no hop
// left; refused too when hedge_budget is spent): a waits on as before,
// and the plan's next hop is still there for a retry. Otherwise a ends holding the winner
// (its hop, connection and head) or, when both failed, the original's
// failure; the loser's connection is closed, never reused. The original
// is late — an answer failure — only when the hedge's head came first and
// fast (within that hop's own first-byte timeout): a slow origin behind
// both is no parent's fault.
func (w *walker) hedge(a *attempt) (sent, refused bool) {
	wh := w.h
	// The budget is spent before the plan is touched: a refused hedge
	// leaves the plan's next hop to a retry (when the wait is given up).
	budget, now := w.h.health.HedgeBudget(), time.Now()
	spent := !(budget > 0 && unbudgeted(a.hop))
	if spent && !wh.hedges.take(budget, now) {
		wh.metrics.hedgeRefused()
		return false, true
	}
	h, ok := w.plan.NextHealthy()
	var uc *upConn
	if ok {
		h, uc, ok = w.take(h, true)
	}
	if !ok {
		if spent {
			wh.hedges.giveBack(now)
		}
		return false, false
	}
	wh.acct.Observe(a.hop.Peer, peers.Outcome{Event: peers.Hedged})
	wh.metrics.hedgeRequest()
	r := w.newRace()
	r.send(h, uc)
	// The original waits on beside the hedge, on a goroutine of its own.
	orig := make(chan struct{})
	go func() {
		a.await(w.rq, nil)
		close(orig)
	}()
	watch := w.side.watch(nil)
	defer watch.stop()
	origDone, hedgeFailed := false, false
	for !origDone || !hedgeFailed {
		select {
		case <-orig:
			origDone = true
			if a.err == nil {
				r.finish(nil) // the original first: the hedge is cut
				return true, false
			}
		case s := <-r.results:
			if s.err != nil {
				hedgeFailed = true
				r.dispose(s)
				continue
			}
			// The hedge first: the original is abandoned.
			r.finish(s)
			if !origDone {
				a.conn.close()
				<-orig
			}
			w.hedgeWon(a, s)
			return true, false
		case <-watch.left:
			r.finish(nil)
			if !origDone {
				a.conn.close()
				<-orig
			}
			a.err = errClientGone
			return true, false
		}
	}
	// Both failed: the original's failure stands.
	r.finish(nil)
	return true, false
}

// hedgeWon makes the hedge s the walk's attempt a, the original having
// been abandoned: it is judged late when the hedge was fast.
func (w *walker) hedgeWon(a, s *attempt) {
	wh := w.h
	fast := s.hop.Peer == nil
	if !fast {
		fbt, _ := w.h.health.FirstByte(s.hop.Peer)
		fast = fbt <= 0 || s.firstByte <= fbt
	}
	if fast { // a was late by the time peerd ran: its deadline stretched by stalls (receive)
		wh.acct.Observe(a.hop.Peer, peers.Outcome{Event: peers.Answered, Class: peers.AnswerLate, At: time.Now()})
	}
	a.conn.close()
	a.conn = nil
	if a.begun {
		wh.acct.EndRequest(a.hop.Peer)
	}
	a.restart(attempt{h: wh, hop: s.hop, role: s.role, progress: s.progress, conn: s.conn, reused: s.reused, begun: s.begun,
		firstByte: s.firstByte, writtenAt: s.writtenAt, headAt: s.headAt, final: s.final, status: s.status,
		gotBytes: true, tunnel: s.tunnel, headReq: s.headReq})
	a.takeHead(s.head)
	if s.hop.Peer != nil {
		wh.acct.Observe(s.hop.Peer, peers.Outcome{Event: peers.Answered, FirstByte: s.firstByte, At: a.headAt, Origin: peers.OriginHash(w.rq.req.Host)})
	}
}

// takeHead parses a won final head into a.resp.
func (a *attempt) takeHead(head []byte) {
	if err := h1.ParseResponse(head, &a.resp); err != nil {
		a.err, a.final = err, false
		return
	}
	a.final, a.status, a.head, a.progress = true, a.resp.Status, head, responseHead
}
