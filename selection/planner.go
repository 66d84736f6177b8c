// Package selection turns request facts and the registry's view into a plan:
// an ordered walk over next hops (siblings, parents by policy, default
// parents, DIRECT) that re-checks each peer's eligibility at the moment it is
// returned. A dead, unknown, drained, in-maintenance or full peer is never
// returned; when nothing is left the plan simply ends, and the caller answers
// 503 — there is no fallback to dead peers.
package selection

import (
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	hrw "github.com/peerd/peerd/internal/rendezvous"
	"github.com/peerd/peerd/peers"
)

// Source is the registry view the planner needs.
type Source interface {
	// Set returns the current peer set; a reload makes a new one.
	Set() *peers.Set
}

// Options configure a Planner.
type Options struct {
	Policy Policy
	Direct Direct
	// MaxTries caps the hops a plan returns (forward_max_tries); 0 = 25.
	MaxTries int
	// Routes are the compiled [[route]] tables, in order.
	Routes []Route
	// index finds the first route for a request: domain-only routes by
	// an O(labels) lookup, the others in order (built by SetOptions).
	index *routeIndex
}

// Request holds the facts about a request that selection uses.
type Request struct {
	Method string
	// URL keys carp; the absolute URI (or host:port for CONNECT). The plan
	// hashes it when built and does not keep it.
	URL string
	// ClientIP keys sourcehash.
	ClientIP string
	// First, when set, is tried before the rest of the plan, with
	// FirstCode as its hierarchy code: the peer an ICP query chose (a
	// sibling or parent that has the object, or the first parent to
	// answer MISS). It is re-checked like any hop and not returned twice.
	First     *peers.Peer
	FirstCode string
	// SkipICPSiblings: the siblings with an ICP port were asked by ICP
	// and did not answer HIT, so they are not asked again over HTTP.
	SkipICPSiblings bool
	// Host, Port and User are what [[route]] matches besides the method
	// and the client (Host canonical; User "" when not authenticated).
	Host string
	Port int
	User string
	// Shared, when set, is the request's cache key: the request may be
	// asked of the key's owner in a fleet (a Router that leads plans),
	// with Binding what the owner's signature covers.
	Shared, Binding []byte
}

// Hop is one next hop. Peer nil means DIRECT to the origin.
type Hop struct {
	Peer *peers.Peer
	// Code is the Squid hierarchy code for the access log.
	Code string
	// Role is what the hop is asked as, given by the plan source that
	// added it (lead.go): nil for a peer asked as itself.
	Role Role
	// Lead: the hop was tried before the plan's own hops (Plan.Lead):
	// its failure sends the request on to them, which is no retry.
	Lead bool
}

// IsDirect reports whether the hop goes straight to the origin.
func (h Hop) IsDirect() bool { return h.Peer == nil }

// Planner builds plans. It is safe for concurrent use.
type Planner struct {
	src  Source
	opts atomic.Pointer[Options]
	view atomic.Pointer[view]
	// The stateful policies: their state (the round-robin counter, the
	// smooth-WRR weights' lock) outlives plans.
	rr  roundRobin
	wrr weightedRoundRobin
}

// view is derived, per peer set, from the registry's set.
type view struct {
	set     *peers.Set
	peers   []*peers.Peer
	hashes  []uint64 // per-peer hash seeds for carp and sourcehash
	weights []float64
	// Peer indices of each stage, in config order; primary by tier too
	// (tiers[0] the lowest).
	siblings, primary, defaults []int
	tiers                       [][]int
	tierOf                      []int
	byName                      map[string]int
	// cw are the smooth-WRR current weights of this set (under wrr.mu).
	cw []int
}

// New returns a planner over src.
func New(src Source, o Options) *Planner {
	p := &Planner{src: src}
	p.SetOptions(o)
	return p
}

// DirectAllowed reports whether DIRECT may be a next hop under the
// options in force.
func (pl *Planner) DirectAllowed() bool { return pl.opts.Load().Direct != DirectNever }

// SetOptions replaces the options (on reload).
func (pl *Planner) SetOptions(o Options) {
	if o.MaxTries <= 0 {
		o.MaxTries = 25
	}
	o.index = indexRoutes(o.Routes)
	pl.opts.Store(&o)
}

func (pl *Planner) currentView() *view {
	set := pl.src.Set()
	v := pl.view.Load()
	if v != nil && v.set == set {
		return v
	}
	ps := set.List
	nv := &view{set: set, peers: ps, hashes: make([]uint64, len(ps)), weights: make([]float64, len(ps)), cw: make([]int, len(ps)),
		byName: make(map[string]int, len(ps)), tierOf: make([]int, len(ps))}
	for i, p := range ps {
		nv.byName[p.Name()] = i
		nv.hashes[i] = hrw.Hash(p.Name())
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
	// Tiers: the primary parents grouped by tier, lowest first, each in
	// config order.
	byTier := map[int][]int{}
	var order []int
	for _, i := range nv.primary {
		t := ps[i].Tier()
		if _, ok := byTier[t]; !ok {
			order = append(order, t)
		}
		byTier[t] = append(byTier[t], i)
	}
	slices.Sort(order)
	for k, t := range order {
		nv.tiers = append(nv.tiers, byTier[t])
		for _, i := range byTier[t] {
			nv.tierOf[i] = k
		}
	}
	if len(nv.tiers) == 0 {
		nv.tiers = [][]int{nil}
	}
	pl.view.CompareAndSwap(v, nv)
	return nv
}

// stages of a plan, in order.
const (
	stageFirst = iota
	stageSiblings
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
	v     *view
	opts  *Options
	pl    *Planner
	stage int
	pass  int // 0: healthy peers, 1: suspect peers
	tier  int // the tier of the parents stage being walked
	tries int
	w     walk
	// The route that chose the candidates (-1: none, every peer), its
	// peers (allow), and the policy and direct in force for the request.
	route     int
	allow     [4]uint64
	allowMore []uint64
	policy    Policy
	direct    Direct

	siblings bool
	skipICP  bool
	first    *peers.Peer
	code     string
	// seed draws, per parent, whether a parent with a latency share
	// below 1 takes this request in the healthy pass (keeps).
	seed uint64

	lead    Hop // returned first when leading (Lead)
	leading bool
	// dest is the request's destination (peers.DestHash of its host): a
	// parent that said it cannot reach it is left out (Health.Reaches).
	dest uint64

	seen     [4]uint64 // peers already returned (first 256 indices)
	seenMore []uint64  // the rest, allocated only for large peer sets
}

// Plan starts a plan for r under the options and peers in force now.
func (pl *Planner) Plan(r Request) Plan { return pl.plan(pl.Routing(), r, false) }

// Routing is the planner's options (policy, direct, routes) and its view
// of the configured peers as of one moment. A request takes the one in
// force when it begins and plans with it, so that a reload while it is
// in flight cannot give it the new routes over the old peers, or the
// reverse. The peers' health stays live: only the configuration is held.
type Routing struct {
	pl *Planner
	o  *Options
	v  *view
}

// Routing returns the options and peers in force now.
func (pl *Planner) Routing() Routing { return Routing{pl: pl, o: pl.opts.Load(), v: pl.currentView()} }

// Plan starts a plan for r under rt.
func (rt Routing) Plan(r Request) Plan { return rt.pl.plan(rt, r, false) }

// Peers are the peers rt plans over.
func (rt Routing) Peers() []*peers.Peer { return rt.v.peers }

// DirectAllowed reports whether DIRECT may be a next hop under rt.
func (rt Routing) DirectAllowed() bool { return rt.o.Direct != DirectNever }

// plan starts a plan; dry leaves the policies' state as it is (explain).
func (pl *Planner) plan(rt Routing, r Request, dry bool) Plan {
	o := rt.o
	p := Plan{v: rt.v, opts: o, pl: pl, w: walk{first: -1}, route: -1, policy: o.Policy, direct: o.Direct}
	p.w.reset()
	if p.route = o.index.routeFor(o.Routes, &r); p.route >= 0 {
		rt := &o.Routes[p.route]
		if rt.hasPolicy {
			p.policy = rt.policy
		}
		if rt.hasDirect {
			p.direct = rt.direct
		}
		for _, n := range rt.peers {
			if i, ok := p.v.byName[n]; ok {
				p.setAllowed(i)
			}
		}
	}
	p.siblings = (r.Method == "GET" || r.Method == "HEAD") && p.direct != DirectAlways
	p.skipICP, p.first, p.code = r.SkipICPSiblings, r.First, r.FirstCode
	p.dest = peers.DestHash(r.Host)
	p.seed = rand.Uint64()
	if p.direct == DirectAlways {
		p.stage = stageDirect
		return p
	}
	switch p.policy {
	case RoundRobin:
		pl.rr.begin(p.v, &r, &p.w, dry)
		p.spreadStart()
	case WeightedRoundRobin:
		pl.wrr.begin(p.v, &r, &p.w, dry)
	case CARP:
		rendezvous{}.begin(p.v, &r, &p.w)
	case SourceHash:
		rendezvous{byClient: true}.begin(p.v, &r, &p.w)
	}
	return p
}

// Next returns the next hop, re-checking eligibility now. The walk is the
// same for every policy: siblings (for GET and HEAD), DIRECT when
// preferred, parents by policy (healthy ones first, then suspect ones),
// default parents, DIRECT when allowed.
func (p *Plan) Next() (Hop, bool) {
	if p.leading {
		p.leading = false
		return p.lead, true
	}
	if p.v == nil || p.tries >= p.opts.MaxTries {
		return Hop{}, false
	}
	for p.stage < stageDone {
		switch p.stage {
		case stageFirst:
			p.stage++
			if i := p.indexOf(p.first); i >= 0 && p.takes(p.v.peers[i]) && p.allowed(i) {
				p.markSeen(i)
				return p.hop(p.v.peers[i], p.code)
			}
			continue
		case stagePreferDirect:
			p.stage++
			if p.direct == DirectPrefer {
				return p.hop(nil, "HIER_DIRECT")
			}
			continue
		case stageDirect:
			p.stage = stageDone
			if p.direct == DirectAllow || p.direct == DirectAlways {
				return p.hop(nil, "HIER_DIRECT")
			}
			continue
		}
		for ; p.pass < passes; p.pass++ {
			if i, code := p.next(); i >= 0 {
				p.markSeen(i)
				return p.hop(p.v.peers[i], code)
			}
			p.w.reset()
		}
		p.pass = 0
		if p.stage == stageParents && p.tier+1 < len(p.v.tiers) {
			p.tier++ // a higher tier: none of the lower is usable
			continue
		}
		p.stage++
	}
	return Hop{}, false
}

// next asks the current stage's order for its next peer: the policy for
// parents, config order for siblings and default parents.
func (p *Plan) next() (int, string) {
	switch p.stage {
	case stageSiblings:
		return firstUp{}.next(p, &p.w), "SIBLING_HIT"
	case stageDefaults:
		return firstUp{}.next(p, &p.w), "DEFAULT_PARENT"
	}
	switch p.policy {
	case RoundRobin:
		return p.pl.rr.next(p, &p.w), p.pl.rr.code()
	case WeightedRoundRobin:
		return p.pl.wrr.next(p, &p.w), p.pl.wrr.code()
	case CARP:
		return rendezvous{}.next(p, &p.w), rendezvous{}.code()
	case SourceHash:
		return rendezvous{byClient: true}.next(p, &p.w), rendezvous{byClient: true}.code()
	}
	return firstUp{}.next(p, &p.w), firstUp{}.code()
}

func (p *Plan) hop(peer *peers.Peer, code string) (Hop, bool) {
	p.tries++
	return Hop{Peer: peer, Code: code}, true
}

// members returns the peer indices of the current stage.
func (p *Plan) members() []int {
	switch p.stage {
	case stageSiblings:
		if p.siblings {
			return p.v.siblings
		}
	case stageParents:
		return p.v.tiers[p.tier]
	case stageDefaults:
		return p.v.defaults
	}
	return nil
}

// usable reports whether peer i may be returned now in the current pass:
// not returned yet, eligible, and healthy in the first pass or suspect in
// the last (and, among siblings, not one ICP already asked). A healthy
// parent whose latency share is below 1 and that does not keep this
// request (keeps) comes in the pass between: after the healthy parents,
// before the suspect ones.
func (p *Plan) usable(i int) bool {
	peer := p.v.peers[i]
	if p.skipICP && p.stage == stageSiblings && peer.ICPPort() != 0 {
		return false
	}
	if p.wasSeen(i) || !p.takes(peer) || !p.allowed(i) {
		return false
	}
	switch {
	case peer.Health().Suspect():
		return p.pass == passSuspect
	case p.stage == stageParents && !p.keeps(i, peer):
		return p.pass == passThinned
	}
	return p.pass == passHealthy
}

// takes reports whether peer may be sent this plan's request now: it is
// eligible, and it did not say it cannot reach the request's destination.
func (p *Plan) takes(peer *peers.Peer) bool {
	h := peer.Health()
	return h.Eligible() && h.Reaches(p.dest)
}

// The passes over a stage's peers: the healthy ones (at their share),
// then the healthy parents a latency share set aside for this request,
// then the suspect ones.
const (
	passHealthy = iota
	passThinned
	passSuspect
	passes
)

// allowed reports whether the route that chose the plan (if any) lets
// peer i carry the request.
func (p *Plan) allowed(i int) bool {
	if p.route < 0 {
		return true
	}
	if i < 256 {
		return p.allow[i/64]&(1<<(i%64)) != 0
	}
	return p.allowMore != nil && p.allowMore[(i-256)/64]&(1<<((i-256)%64)) != 0
}

func (p *Plan) setAllowed(i int) {
	if i < 256 {
		p.allow[i/64] |= 1 << (i % 64)
		return
	}
	if p.allowMore == nil {
		p.allowMore = make([]uint64, (len(p.v.peers)-256+63)/64)
	}
	p.allowMore[(i-256)/64] |= 1 << ((i - 256) % 64)
}

// Route is the index of the [[route]] that chose the plan's candidates;
// -1 when none matched.
func (p *Plan) Route() int { return p.route }

// indexOf is peer's index in the plan's view; -1 for nil or a peer a
// reload removed.
func (p *Plan) indexOf(peer *peers.Peer) int {
	if peer == nil {
		return -1
	}
	for i, q := range p.v.peers {
		if q == peer {
			return i
		}
	}
	return -1
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

func (p *Plan) score(i int, key uint64) float64 {
	w := p.v.weights[i]
	if pe := p.v.peers[i]; pe.Health().Ramping() {
		w *= pe.Health().Ramp(time.Now()) // slow start
	}
	return hrw.Score(hrw.Mix(key^p.v.hashes[i]), w)
}
