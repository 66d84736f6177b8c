package selection

// This file holds what is left of a plan: the next healthy hop
// (NextHealthy), and whether a hop is left at all, asked without taking it
// (Left: the walk's decision reads it).

import "slices"

// DefaultRoute is a request of the default route: a GET no [[route]]
// with a domain can match, from loopback. Whether its plan has a hop is
// whether a peerd has a usable next hop (readiness, and what a peerd that
// is a parent tells its children).
var DefaultRoute = Request{Method: "GET", URL: "http://peerd-readyz.invalid/", ClientIP: "127.0.0.1", Host: "peerd-readyz.invalid"}

// Left reports whether the plan has a hop left (healthy: one that is not
// suspect), without taking it: a copy of the plan is walked, which
// changes nothing (a policy's shared state moves when a plan begins, not
// as it is walked).
func (p *Plan) Left(healthy bool) bool {
	c := *p
	if p.seenMore != nil {
		c.seenMore = slices.Clone(p.seenMore) // large peer sets: the copy marks its own
	}
	if healthy {
		_, ok := c.NextHealthy()
		return ok
	}
	_, ok := c.Next()
	return ok
}

// NextHealthy returns the next hop that is not suspect (DIRECT counts as
// healthy), passing the suspect ones by: a hedge or a connect race goes
// to a healthy hop only, a suspect one being no better bet.
func (p *Plan) NextHealthy() (Hop, bool) {
	h, ok := p.Next()
	for ok && h.Peer != nil && h.Peer.Health().Suspect() {
		h, ok = p.Next()
	}
	return h, ok
}
