package fleet

// This file holds the choice of a cache key's owner (contract section
// 20): weighted rendezvous hashing over the members that may own keys,
// bounded by max_load (consistent hashing with bounded loads). It is a
// pure function of the key and the candidates, so every member computes
// the same owner from the same view, in whatever order it lists them.
//
// Rendezvous (internal/rendezvous, as CARP among parents): each member
// scores the key weight / -ln(u), u a uniform hash of the member's name
// and the key; the highest score owns it.
// A member that joins takes only the keys it now scores highest on, and
// one that leaves gives up only its own: nothing moves between the
// others. Bounded load: walking the members in score order, the owner is
// the first whose in-flight owner fetches are under ceil(max_load × the
// average with this one counted) (and at least minBound), so a hot key's followers spill to the
// next member in its order instead of piling onto one.

import (
	"math"
	"sort"

	"github.com/peerd/peerd/internal/rendezvous"
)

// minBound is the fewest in-flight owner fetches at which a member may be
// skipped: at a handful, max_load × the average is a fetch or two, and a
// key would move with every fetch a member starts (a URL fetched once for
// the fleet would be fetched again by the next member in its order).
const minBound = 8

// Candidate is a member that may own keys, with the in-flight owner
// fetches it reported.
type Candidate struct {
	Node   string
	Weight float64 // > 0; 1 for every member today
	Load   int64
}

// Owner is the owner of key among cs, bounded by maxLoad (0: unbounded);
// "" when cs is empty.
func Owner(key []byte, cs []Candidate, maxLoad float64) string {
	switch len(cs) {
	case 0:
		return ""
	case 1:
		return cs[0].Node
	}
	order := ranked(key, cs)
	if maxLoad <= 0 {
		return cs[order[0]].Node
	}
	var total int64
	for _, c := range cs {
		total += max(c.Load, 0)
	}
	limit := max(int64(math.Ceil(maxLoad*float64(total+1)/float64(len(cs)))), minBound)
	for _, i := range order {
		if cs[i].Load < limit {
			return cs[i].Node
		}
	}
	return cs[order[0]].Node // not reached: some member is at or under the average
}

// ranked is the indexes of cs from the highest score for key down; ties
// (equal scores) go by name, so the order does not depend on cs's.
func ranked(key []byte, cs []Candidate) []int {
	kh := rendezvous.Hash(key)
	scores := make([]float64, len(cs))
	order := make([]int, len(cs))
	for i, c := range cs {
		order[i] = i
		w := c.Weight
		if w <= 0 {
			w = 1
		}
		scores[i] = rendezvous.Score(rendezvous.Mix(kh^rendezvous.Hash(c.Node)), w)
	}
	sort.Slice(order, func(a, b int) bool {
		if scores[order[a]] != scores[order[b]] {
			return scores[order[a]] > scores[order[b]]
		}
		return cs[order[a]].Node < cs[order[b]].Node
	})
	return order
}
