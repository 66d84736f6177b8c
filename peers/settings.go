package peers

// This file holds Settings: the health settings of one config
// generation, as a request reads them from its start to its end.

import "time"

// Settings is what a request reads of [health] and of its peers'
// settings, as they were when its config generation was made: a reload
// in the middle of a request changes none of it (first_byte_timeout,
// hedging and its budget, connect timeouts). What the peers learned
// (an automatic first-byte timeout) is read live.
type Settings struct {
	opts  *Options
	peers map[*Peer]*settings
}

// Settings snapshots the settings in force now.
func (r *Registry) Settings() *Settings {
	ps := r.Peers()
	s := &Settings{opts: r.opts.Load(), peers: make(map[*Peer]*settings, len(ps))}
	for _, p := range ps {
		s.peers[p] = p.settings()
	}
	return s
}

// of is p's settings in s (a peer made since, a fleet member's hop: its
// own, now).
func (s *Settings) of(p *Peer) *settings {
	if c, ok := s.peers[p]; ok {
		return c
	}
	return p.settings()
}

// FirstByte is Registry.FirstByte as of s.
func (s *Settings) FirstByte(p *Peer) (timeout time.Duration, hedge bool) {
	return firstByte(p, s.of(p), s.opts)
}

// HedgeBudget is hedge_budget as of s: the share of the last 10 s of
// requests that hedges may add.
func (s *Settings) HedgeBudget() float64 { return float64(s.opts.Health.HedgeBudget) }

// ConnectTimeout is p's connect timeout as of s.
func (s *Settings) ConnectTimeout(p *Peer) time.Duration { return s.of(p).connectTimeout }
