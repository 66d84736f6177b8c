package selection

// This file holds a parent's latency share in the plan (contract section
// 21): a parent slower than its peers takes only that share of the
// requests it would get in the healthy pass; the others come to it after
// the healthy parents, as to a suspect one.

import (
	hrw "github.com/peerd/peerd/internal/rendezvous"
	"github.com/peerd/peerd/peers"
)

// spreadStart moves a round-robin plan's start off a parent that does not
// keep this request (keeps) to one of the healthy parents that do, drawn
// evenly, so that the turns the slow parent gives up are shared by the
// others rather than all taken by the one after it in the rotation.
func (p *Plan) spreadStart() {
	m := p.v.tiers[0]
	if len(m) == 0 || p.w.start >= len(m) {
		return
	}
	if i := m[p.w.start]; !healthy(p.v.peers[i]) || !p.allowed(i) || p.keeps(i, p.v.peers[i]) {
		return
	}
	n := 0
	for _, i := range m {
		if healthy(p.v.peers[i]) && p.allowed(i) && p.keeps(i, p.v.peers[i]) {
			n++
		}
	}
	if n == 0 {
		return
	}
	k := int(hrw.Mix(p.seed^0x9e3779b97f4a7c15) % uint64(n))
	for pos, i := range m {
		if healthy(p.v.peers[i]) && p.allowed(i) && p.keeps(i, p.v.peers[i]) {
			if k == 0 {
				p.w.start = pos
				return
			}
			k--
		}
	}
}

// keeps reports whether a parent with a latency share s below 1 (contract
// section 21) takes this request in the healthy pass: a draw per request
// and parent below s. Under carp and sourcehash the draw is the request
// key's, so such a parent keeps the same keys while its share holds, and
// the parents at a normal share keep their mapping: only the slow
// parent's keys move, to where the hash order puts them next.
func (p *Plan) keeps(i int, peer *peers.Peer) bool {
	s := peer.Health().LatencyShare()
	if s >= 1 || p.policy == WeightedRoundRobin {
		return true // (weighted round-robin scales the weight instead)
	}
	x := p.seed
	if p.policy == CARP || p.policy == SourceHash {
		x = p.w.key
	}
	return float64(hrw.Mix(x^p.v.hashes[i])>>11)/(1<<53) < s
}
