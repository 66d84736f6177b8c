package selection

// This file holds Left: whether a plan has a hop left, asked without
// taking it (the walk's decision reads it).

import "slices"

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
