package selection

// This file holds what a plan source outside selection adds to a plan:
// Router, the routing a request plans with (a Routing, or one wrapped by
// another source of hops), and a lead hop, tried before the plan's own
// (the fleet's owner of the request's key), with the role it is asked as.

import "github.com/peerd/peerd/peers"

// Router is what a request plans with: a Routing, or a Routing wrapped
// by a source that leads its plans with a hop of its own.
type Router interface {
	Plan(r Request) Plan
	Peers() []*peers.Peer
}

// Role is what a hop is asked as when a plan source gives it one (the
// fleet's owner of a key: fleet.OwnerRole). The engine declares what it
// asks of a role (forwarding.HopRole) and calls it at named points; a
// hop without one is a peer asked as itself.
type Role any

// Lead makes h the plan's next hop, before the rest. It is returned once,
// as it is (its source checked it), marked Lead, and not counted in
// max_tries, which bounds the plan's own hops.
func (p *Plan) Lead(h Hop) {
	h.Lead = true
	p.lead, p.leading = h, true
}
