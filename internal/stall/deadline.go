package stall

// This file holds Stretch, the one way a deadline moves on by peerd's own
// stalls: the round trip's read deadlines, the connect race's hedge delay
// and the HTTP probe's read each keep one, so that a stall is counted
// once however often the deadline is looked at.

import "time"

// Stretch is the part of peerd's stalls since a start that a deadline has
// already been moved on by.
type Stretch struct {
	g         *Guard
	from      time.Time
	stretched time.Duration
}

// Since starts a stretch at from (a nil or off Guard never stretches).
func (g *Guard) Since(from time.Time) Stretch { return Stretch{g: g, from: from} }

// More is how much further a deadline must move on at now: the stalls
// since the start not yet counted (0 for none), which it counts.
func (s *Stretch) More(now time.Time) time.Duration {
	d := s.g.Stalled(s.from, now) - s.stretched
	if d <= 0 {
		return 0
	}
	s.stretched += d
	return d
}
