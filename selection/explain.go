package selection

// This file holds GET /plan: a plan explained, with the peers skipped and
// why.

import (
	"fmt"
	"math"

	"github.com/peerd/peerd/peers"
)

// Explain answers "why did this request go to p2?": the plan peerd would
// walk for r now, and every configured peer left out of it with the
// reason. Nothing is sent, and the policies' state (the round-robin turn,
// the weighted-round-robin weights) is left as it is: the plan shown is the
// one the next such request would get.
type Explanation struct {
	Hops    []ExplainedHop `json:"hops"`
	Skipped []SkippedPeer  `json:"skipped"`
	// Denied is set when the request would be refused before any plan
	// is walked (client address, host, ports, deny_to): its error code
	// and detail. Hops is then empty.
	Denied string `json:"denied,omitempty"`
	// ICP lists the peers an ICP query would ask first; their answers may
	// put one of them ahead of the policy's order.
	ICP []string `json:"icp,omitempty"`
	// Rule is the [[rule]] that allowed (or, with Denied, refused) the
	// request; Route the [[route]] that chose its candidates. Absent when
	// none matched.
	Rule  *int `json:"rule,omitempty"`
	Route *int `json:"route,omitempty"`
	// Owner is the fleet member that owns the URL ([fleet]
	// shared_cache); null when the fleet does not share its caches.
	Owner *string `json:"owner"`
}

// ExplainedHop is one hop of an explained plan.
type ExplainedHop struct {
	Peer string `json:"peer"` // "DIRECT" for the origin
	Type string `json:"type"` // parent, sibling or direct
	Why  string `json:"why"`
	Tier int    `json:"tier"` // the parent's tier (0 for siblings and DIRECT)
	// LatencyShare is a parent's share factor in force (1 = normal; a
	// parent slower than its peers has less): absent for others.
	LatencyShare *float64 `json:"latency_share,omitempty"`
}

// SkippedPeer is a configured peer the plan leaves out.
type SkippedPeer struct {
	Peer string `json:"peer"`
	Why  string `json:"why"`
}

// Explain builds the plan for r without walking it for real.
func (pl *Planner) Explain(r Request) Explanation {
	p := pl.plan(pl.Routing(), r, true)
	out := Explanation{Hops: []ExplainedHop{}, Skipped: []SkippedPeer{}}
	if p.route >= 0 {
		rt := p.route
		out.Route = &rt
	}
	in := map[*peers.Peer]bool{}
	for {
		stage, pass := p.stage, p.pass
		h, ok := p.Next()
		if !ok {
			break
		}
		if h.IsDirect() {
			out.Hops = append(out.Hops, ExplainedHop{Peer: "DIRECT", Type: "direct", Why: "direct = " + p.direct.String()})
			continue
		}
		in[h.Peer] = true
		why := p.policy.String()
		switch {
		case h.Peer.Type() == peers.Sibling:
			why = "sibling, asked with only-if-cached"
		case h.Peer.IsDefault():
			why = "default parent, after the others"
		case h.Peer.Health().Suspect():
			why += ", suspect: after the healthy parents"
		case stage == stageParents && pass == passThinned:
			why += fmt.Sprintf(", slower than its peers (latency share %.2f): after the others this time", h.Peer.Health().LatencyShare())
		}
		if h.Peer.Health().Ramping() {
			why += ", slow start"
		}
		if p.route >= 0 {
			why += fmt.Sprintf(", route %d", p.route)
		}
		eh := ExplainedHop{Peer: h.Peer.Name(), Type: h.Peer.Type().String(), Why: why, Tier: h.Peer.Tier()}
		if h.Peer.Type() == peers.Parent {
			ls := math.Round(h.Peer.Health().LatencyShare()*1000) / 1000
			eh.LatencyShare = &ls
		}
		out.Hops = append(out.Hops, eh)
	}
	for _, pe := range p.v.peers {
		if in[pe] {
			continue
		}
		out.Skipped = append(out.Skipped, SkippedPeer{Peer: pe.Name(), Why: skippedWhy(pe, &p, r)})
	}
	return out
}

func skippedWhy(pe *peers.Peer, p *Plan, r Request) string {
	switch {
	case p.direct == DirectAlways:
		return "direct = always"
	case p.indexOf(pe) >= 0 && !p.allowed(p.indexOf(pe)):
		return fmt.Sprintf("not a peer of route %d", p.route)
	case pe.Type() == peers.Sibling && r.Method != "GET" && r.Method != "HEAD":
		return "sibling: asked for GET and HEAD only"
	case pe.Health().AdminState() != peers.Enabled:
		return pe.Health().AdminState().String()
	case pe.Health().State() == peers.Dead:
		why := "dead"
		if pe.Health().DeadCause() == peers.DeadByAnswer {
			why = "dead (answers: accepts connections but its answers failed; revived by an HTTP probe only)"
		}
		if pe.Health().Flapping() {
			why += " (flapping: revival held)"
		}
		return why
	case pe.Health().State() == peers.Unknown:
		return "unknown: no probe verdict yet"
	case pe.Health().NoNextHop():
		return "no usable next hop of its own, as it said: probed until it has one"
	case !pe.Health().Reaches(p.dest):
		return "said it cannot reach " + r.Host + ": probed through until it does"
	case pe.Health().Full():
		return "full: at max_conn"
	case p.tries >= p.opts.MaxTries:
		return "beyond forward_max_tries"
	}
	return "not eligible"
}
