package selection

// This file holds what a plan source outside selection adds to a plan:
// Router, the routing a request plans with (a Routing, or one wrapped by
// another source of hops), and a lead hop, tried before the plan's own
// (the fleet's owner of the request's key).

import "github.com/peerd/peerd/peers"

// Router is what a request plans with: a Routing, or a Routing wrapped
// by a source that leads its plans with a hop of its own.
type Router interface {
	Plan(r Request) Plan
	Peers() []*peers.Peer
}

// Lead makes h the plan's next hop, before the rest. It is returned once,
// as it is (its source checked it), and not counted in max_tries, which
// bounds the plan's own hops.
func (p *Plan) Lead(h Hop) { p.lead, p.leading = h, true }

// Leads reports whether the hop came from a source that leads plans (a
// fleet owner): its request carries the source's signature.
func (h Hop) Leads() bool { return len(h.Sig) > 0 }
