package selection

// This file holds the selection policies: first-up, round-robin, smooth
// weighted round-robin and weighted rendezvous hashing (carp and
// sourcehash), each walking the parents of the plan's current tier.

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	hrw "github.com/peerd/peerd/internal/rendezvous"

	"github.com/peerd/peerd/peers"
)

// Each policy is a type with next, which returns the walk's next peer
// index among those usable in the current pass and tier (or -1 when it has
// no more), and code, the access log's hierarchy code; those with state
// per plan also have a begin, which runs once per plan (round-robin and
// weighted round-robin take the plan's view, rendezvous the request). Per-plan state lives in the plan's walk, so a plan
// allocates nothing. The plan picks the policy with a switch (Plan.next,
// Planner.Plan) rather than an interface: a pointer into the plan passed
// through an interface call makes the plan escape to the heap, three
// allocations per request.

// walk is a policy's per-plan, per-pass state.
type walk struct {
	cursor int     // position in the stage's order
	start  int     // round-robin rotation start
	first  int     // weighted-round-robin pick, -1 for none
	picked bool    // weighted-round-robin: the pick was offered
	key    uint64  // carp/sourcehash key hash
	lastIx int     // hash order: the last index returned in this pass
	lastSc float64 // hash order: its score
}

// reset starts a pass over (cursor and hash position; the per-plan picks
// stay).
func (w *walk) reset() { w.cursor, w.lastIx, w.lastSc = 0, -1, math.Inf(1) }

func healthy(p *peers.Peer) bool { return p.Health().Eligible() && !p.Health().Suspect() }

// firstUp walks in config order; it also orders siblings and default
// parents.
type firstUp struct{}

func (firstUp) code() string { return policyCodes[FirstUp] }

func (firstUp) next(p *Plan, w *walk) int {
	m := p.members()
	for w.cursor < len(m) {
		i := m[w.cursor]
		w.cursor++
		if p.usable(i) {
			return i
		}
	}
	return -1
}

// roundRobin starts each plan at the next healthy parent in turn, so live
// parents share evenly; a revived parent joins the rotation with no owed
// turns. In the later passes (parents set aside by their latency share,
// then suspect ones) they come in config order.
type roundRobin struct{ n atomic.Uint64 }

func (rr *roundRobin) code() string { return policyCodes[RoundRobin] }

func (rr *roundRobin) begin(v *view, _ *Request, w *walk, dry bool) {
	n := 0
	for _, i := range v.tiers[0] {
		if healthy(v.peers[i]) {
			n++
		}
	}
	if n == 0 {
		return
	}
	turn := rr.n.Load()
	if !dry {
		turn = rr.n.Add(1) - 1
	}
	k := int(turn % uint64(n))
	for pos, i := range v.tiers[0] {
		if healthy(v.peers[i]) {
			if k == 0 {
				w.start = pos
				return
			}
			k--
		}
	}
}

func (rr *roundRobin) next(p *Plan, w *walk) int {
	m := p.members()
	for w.cursor < len(m) {
		c := w.cursor
		w.cursor++
		if p.pass == passHealthy {
			c = (w.start + c) % len(m)
		}
		if i := m[c]; p.usable(i) {
			return i
		}
	}
	return -1
}

// weightedRoundRobin is nginx's smooth weighted round-robin over healthy
// parents: weights 5/1/1 give a a b a c a a. Its pick comes first, the
// other parents follow in config order. An ineligible peer's current
// weight is frozen, so a revived peer gets no burst of owed turns.
type weightedRoundRobin struct{ mu sync.Mutex }

func (wr *weightedRoundRobin) code() string { return policyCodes[WeightedRoundRobin] }

func (wr *weightedRoundRobin) begin(v *view, _ *Request, w *walk, dry bool) {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	cw := v.cw
	if dry {
		cw = append([]int(nil), v.cw...) // explain: the next pick, the state untouched
	}
	best, total := -1, 0
	for _, i := range v.tiers[0] {
		p := v.peers[i]
		if !healthy(p) {
			continue
		}
		// Weights in hundredths, so that slow start can ramp a revived
		// parent's share smoothly from 10%.
		wt := p.Weight() * 100
		if p.Health().Ramping() {
			wt = max(1, int(float64(wt)*p.Health().Ramp(time.Now())))
		}
		if s := p.Health().LatencyShare(); s < 1 {
			// Slower than its peers: its share scaled (section 21).
			wt = max(1, int(float64(wt)*s))
		}
		cw[i] += wt
		total += wt
		if best < 0 || cw[i] > cw[best] {
			best = i
		}
	}
	if best >= 0 {
		cw[best] -= total
	}
	w.first = best
}

func (wr *weightedRoundRobin) next(p *Plan, w *walk) int {
	if p.pass == passHealthy && !w.picked {
		w.picked = true
		if w.first >= 0 && p.usable(w.first) {
			return w.first
		}
	}
	return firstUp{}.next(p, w)
}

// rendezvous walks parents in descending weighted rendezvous score for the
// request's key (the URL for carp, the client address for sourcehash):
// score = weight / -ln(u), u uniform from hash(key, peer). When a peer
// dies only the keys it ranked first move, and shares follow weights.
type rendezvous struct{ byClient bool }

func (h rendezvous) code() string {
	if h.byClient {
		return policyCodes[SourceHash]
	}
	return policyCodes[CARP]
}

func (h rendezvous) begin(_ *view, r *Request, w *walk) {
	if h.byClient {
		w.key = hrw.Hash(r.ClientIP)
	} else {
		w.key = hrw.Hash(r.URL)
	}
}

func (h rendezvous) next(p *Plan, w *walk) int {
	best, bestSc := -1, math.Inf(-1)
	for _, i := range p.members() {
		if !p.usable(i) {
			continue
		}
		sc := p.score(i, w.key)
		// Strictly after the last returned, in (score desc, index asc).
		if sc > w.lastSc || (sc == w.lastSc && i <= w.lastIx) {
			continue
		}
		if sc > bestSc {
			best, bestSc = i, sc
		}
	}
	if best >= 0 {
		w.lastIx, w.lastSc = best, bestSc
	}
	return best
}
