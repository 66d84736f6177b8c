// Package selection turns request facts and the registry's view into a plan:
// an ordered walk over next hops (siblings, parents by policy, default
// parents, DIRECT) that re-checks each peer's eligibility at the moment it is
// returned. A dead, unknown, drained, in-maintenance or full peer is never
// returned; when nothing is left the plan simply ends, and the caller answers
// 503 — there is no fallback to dead peers.
package selection

import (
	"hash/fnv"
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/peerd/peerd/peers"
)

// Source is the registry view the planner needs.
type Source interface {
	// Peers returns the current peers in config order; a new slice on
	// every change of the set.
	Peers() []*peers.Peer
}

// Options configure a Planner.
type Options struct {
	Policy Policy
	Direct Direct
	// MaxTries caps the hops a plan returns (forward_max_tries); 0 = 25.
	MaxTries int
}

// Request holds the facts about a request that selection uses.
type Request struct {
	Method string
	// URL keys carp; the absolute URI (or host:port for CONNECT).
	URL string
	// ClientIP keys sourcehash.
	ClientIP string
}

// Hop is one next hop. Peer nil means DIRECT to the origin.
type Hop struct {
	Peer *peers.Peer
	// Code is the Squid hierarchy code for the access log.
	Code string
}

// IsDirect reports whether the hop goes straight to the origin.
func (h Hop) IsDirect() bool { return h.Peer == nil }

// Planner builds plans. It is safe for concurrent use.
type Planner struct {
	src  Source
	opts atomic.Pointer[Options]
	view atomic.Pointer[view]
	rr   atomic.Uint64

	wrrMu sync.Mutex // guards the smooth-WRR current weights in view
}

// view is derived, per peer set, from the registry's slice.
type view struct {
	peers   []*peers.Peer
	hashes  []uint64 // per-peer hash seeds for carp and sourcehash
	weights []float64
	cw      []int // smooth WRR current weights, under wrrMu
	// Peer indices of each stage, in config order.
	siblings, primary, defaults []int
}

// New returns a planner over src.
func New(src Source, o Options) *Planner {
	p := &Planner{src: src}
	p.SetOptions(o)
	return p
}

// SetOptions replaces the options (on reload).
func (pl *Planner) SetOptions(o Options) {
	if o.MaxTries <= 0 {
		o.MaxTries = 25
	}
	pl.opts.Store(&o)
}

func (pl *Planner) currentView() *view {
	ps := pl.src.Peers()
	v := pl.view.Load()
	if v != nil && len(v.peers) == len(ps) && unsafe.SliceData(v.peers) == unsafe.SliceData(ps) {
		return v
	}
	nv := &view{peers: ps, hashes: make([]uint64, len(ps)), weights: make([]float64, len(ps)), cw: make([]int, len(ps))}
	for i, p := range ps {
		h := fnv.New64a()
		h.Write([]byte(p.Name()))
		nv.hashes[i] = h.Sum64()
		nv.weights[i] = float64(p.Weight())
		switch {
		case p.Type() == peers.Sibling:
			nv.siblings = append(nv.siblings, i)
		case p.IsDefault():
			nv.defaults = append(nv.defaults, i)
		default:
			nv.primary = append(nv.primary, i)
		}
	}
	pl.view.CompareAndSwap(v, nv)
	return nv
}

// stages of a plan, in order.
const (
	stageSiblings = iota
	stagePreferDirect
	stageParents
	stageDefaults
	stageDirect
	stageDone
)

// Plan is an iterator over next hops; call Next until it returns false. It
// is a value (building one allocates nothing) and is not safe for
// concurrent use.
type Plan struct {
	v      *view
	opts   *Options
	stage  int
	pass   int // 0: healthy peers, 1: suspect peers
	cursor int // position within the stage's order
	tries  int

	siblings bool
	start    int     // round-robin rotation start
	first    int     // weighted-round-robin pick, -1 for none
	key      uint64  // carp/sourcehash key hash
	lastIdx  int     // hash order: last index returned in this pass
	lastSc   float64 // hash order: its score

	seen     [4]uint64 // peers already returned (first 256 indices)
	seenMore []uint64  // the rest, allocated only for large peer sets
}

// Plan starts a plan for r.
func (pl *Planner) Plan(r Request) Plan {
	o := pl.opts.Load()
	p := Plan{v: pl.currentView(), opts: o, first: -1, lastIdx: -1, lastSc: math.Inf(1)}
	p.siblings = (r.Method == "GET" || r.Method == "HEAD") && o.Direct != DirectAlways
	if o.Direct == DirectAlways {
		p.stage = stageDirect
		return p
	}
	switch o.Policy {
	case RoundRobin:
		p.start = pl.rrStart(p.v)
	case WeightedRoundRobin:
		p.first = pl.wrrPick(p.v)
	case CARP:
		p.key = hashString(r.URL)
	case SourceHash:
		p.key = hashString(r.ClientIP)
	}
	return p
}

func healthy(p *peers.Peer) bool { return p.Eligible() && !p.Suspect() }

// rrStart picks the k-th eligible primary parent, k rotating per request, so
// live parents share evenly; a revived parent joins the rotation with no
// owed turns.
func (pl *Planner) rrStart(v *view) int {
	n := 0
	for _, i := range v.primary {
		if healthy(v.peers[i]) {
			n++
		}
	}
	if n == 0 {
		return 0
	}
	k := int((pl.rr.Add(1) - 1) % uint64(n))
	for pos, i := range v.primary {
		if healthy(v.peers[i]) {
			if k == 0 {
				return pos
			}
			k--
		}
	}
	return 0
}

// wrrPick is nginx's smooth weighted round-robin over eligible healthy
// primary parents: weights 5/1/1 give a a b a c a a. An ineligible peer's
// current weight is frozen, so a revived peer gets no burst of owed turns.
func (pl *Planner) wrrPick(v *view) int {
	pl.wrrMu.Lock()
	defer pl.wrrMu.Unlock()
	best, total := -1, 0
	for _, i := range v.primary {
		p := v.peers[i]
		if !healthy(p) {
			continue
		}
		w := p.Weight()
		v.cw[i] += w
		total += w
		if best < 0 || v.cw[i] > v.cw[best] {
			best = i
		}
	}
	if best >= 0 {
		v.cw[best] -= total
	}
	return best
}

// Next returns the next hop, re-checking eligibility now.
func (p *Plan) Next() (Hop, bool) {
	if p.v == nil || p.tries >= p.opts.MaxTries {
		return Hop{}, false
	}
	for p.stage < stageDone {
		switch p.stage {
		case stagePreferDirect:
			p.stage++
			if p.opts.Direct == DirectPrefer {
				return p.hop(nil, "DIRECT")
			}
		case stageDirect:
			p.stage = stageDone
			if p.opts.Direct == DirectAllow || p.opts.Direct == DirectAlways {
				return p.hop(nil, "DIRECT")
			}
		default:
			if i := p.nextPeer(); i >= 0 {
				p.markSeen(i)
				return p.hop(p.v.peers[i], p.code(i))
			}
			p.stage++
			p.pass, p.cursor, p.lastIdx, p.lastSc = 0, 0, -1, math.Inf(1)
		}
	}
	return Hop{}, false
}

func (p *Plan) hop(peer *peers.Peer, code string) (Hop, bool) {
	p.tries++
	return Hop{Peer: peer, Code: code}, true
}

func (p *Plan) code(i int) string {
	switch p.stage {
	case stageSiblings:
		return "SIBLING_HIT"
	case stageDefaults:
		return "DEFAULT_PARENT"
	}
	return policyCodes[p.opts.Policy]
}

// members returns the peer indices of the current stage.
func (p *Plan) members() []int {
	switch p.stage {
	case stageSiblings:
		if p.siblings {
			return p.v.siblings
		}
	case stageParents:
		return p.v.primary
	case stageDefaults:
		return p.v.defaults
	}
	return nil
}

// usable reports whether peer i may be returned now in the current pass:
// eligible, and healthy in pass 0 or suspect in pass 1.
func (p *Plan) usable(i int) bool {
	peer := p.v.peers[i]
	return !p.wasSeen(i) && peer.Eligible() && peer.Suspect() == (p.pass == 1)
}

// A peer is returned at most once per plan, even if it turns suspect (its
// connect just failed) between the healthy and the suspect pass.
func (p *Plan) markSeen(i int) {
	if i < 256 {
		p.seen[i/64] |= 1 << (i % 64)
		return
	}
	if p.seenMore == nil {
		p.seenMore = make([]uint64, (len(p.v.peers)-256+63)/64)
	}
	p.seenMore[(i-256)/64] |= 1 << ((i - 256) % 64)
}

func (p *Plan) wasSeen(i int) bool {
	if i < 256 {
		return p.seen[i/64]&(1<<(i%64)) != 0
	}
	return p.seenMore != nil && p.seenMore[(i-256)/64]&(1<<((i-256)%64)) != 0
}

// nextPeer returns the index of the next usable peer of the stage, or -1.
func (p *Plan) nextPeer() int {
	m := p.members()
	if len(m) == 0 {
		return -1
	}
	for ; p.pass < 2; p.pass, p.cursor, p.lastIdx, p.lastSc = p.pass+1, 0, -1, math.Inf(1) {
		if p.stage == stageParents && (p.opts.Policy == CARP || p.opts.Policy == SourceHash) {
			if i := p.nextByScore(m); i >= 0 {
				return i
			}
			continue
		}
		for p.cursor <= len(m) {
			c := p.cursor
			p.cursor++
			if i := p.orderAt(m, c); i >= 0 && p.usable(i) {
				return i
			}
		}
	}
	return -1
}

// orderAt maps a position in the stage's walk to a peer index (-1: none).
// Position 0 is the policy's pick where there is one.
func (p *Plan) orderAt(m []int, c int) int {
	n := len(m)
	if p.stage == stageParents && p.pass == 0 {
		switch p.opts.Policy {
		case RoundRobin:
			if c == n {
				return -1
			}
			return m[(p.start+c)%n]
		case WeightedRoundRobin:
			if c == 0 {
				return p.first
			}
			return m[c-1]
		}
	}
	if c == n {
		return -1
	}
	return m[c]
}

// nextByScore walks parents in descending weighted rendezvous score for
// the key: score = weight / -ln(u), u uniform from hash(key, peer). When a
// peer dies only the keys it ranked first move, and shares follow weights.
func (p *Plan) nextByScore(m []int) int {
	best, bestSc := -1, math.Inf(-1)
	for _, i := range m {
		if !p.usable(i) {
			continue
		}
		sc := p.score(i)
		// Strictly after the last returned in (score desc, index asc).
		if sc > p.lastSc || (sc == p.lastSc && i <= p.lastIdx) {
			continue
		}
		if sc > bestSc {
			best, bestSc = i, sc
		}
	}
	if best >= 0 {
		p.lastIdx, p.lastSc = best, bestSc
	}
	return best
}

func (p *Plan) score(i int) float64 {
	h := mix64(p.key ^ p.v.hashes[i])
	u := (float64(h>>11) + 0.5) / (1 << 53) // (0, 1)
	return p.v.weights[i] / -math.Log(u)
}

func hashString(s string) uint64 {
	// FNV-1a, inlined to avoid the hash.Hash allocation on the hot path.
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mix64 is splitmix64's finaliser: every input bit affects every output bit.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
