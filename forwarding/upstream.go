package forwarding

// This file holds how an attempt gets its connection: an idle one from
// the hop's pool, a new connect, or a hedged race of connects along the
// plan; and which pool and origin a hop is.

import (
	"errors"
	"time"

	"github.com/peerd/peerd/internal/h1"
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
		if hop.Peer == nil || p.acct.BeginRequest(hop.Peer, tx.start) {
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
		if tx.dialFailed(hop, err) != nextHop {
			return nil
		}
		var more bool
		if hop, more = plan.Next(); !more {
			return nil
		}
		p.metrics.retry(connectFailed.String())
		pooled = true
	}
}

// attemptOn starts the transaction's attempt at hop on uc.
func (tx *txn) attemptOn(hop selection.Hop, uc *upConn, reused bool) *attempt {
	a := &tx.a
	a.restart(attempt{tx: tx, hop: hop, progress: connected, reused: reused, conn: uc, begun: hop.Peer != nil})
	return a
}

// dialFailed records a failed connect, frees its slot, and says what
// follows (decide: the next hop).
func (tx *txn) dialFailed(hop selection.Hop, err error) verdict {
	a := attempt{hop: hop, progress: dialling, err: err}
	class := a.class(false)
	tx.noteFailure(&a, class)
	if hop.Peer != nil {
		tx.cc.p.acct.EndRequest(hop.Peer)
	}
	return decide(class, tx.facts, false)
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
			if tx.dialFailed(res.hop, res.err) != nextHop && pending == 0 {
				r.finish()
				return nil
			}
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
