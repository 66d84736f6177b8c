package fleet

// This file holds the choice of a cache key's owner (contract section
// 20): weighted rendezvous hashing over the members that may own keys,
// bounded by max_load (consistent hashing with bounded loads). It is a
// pure function of the key and the candidates, so every member computes
// the same owner from the same view, in whatever order it lists them.
//
// Rendezvous: each member scores the key -weight / ln(u), u a uniform
// (0,1] hash of the member's name and the key; the highest score owns it.
// A member that joins takes only the keys it now scores highest on, and
// one that leaves gives up only its own: nothing moves between the
// others. Bounded load: walking the members in score order, the owner is
// the first whose in-flight owner fetches are under ceil(max_load × the
// average with this one counted) (and at least minBound), so a hot key's followers spill to the
// next member in its order instead of piling onto one.

import (
	"math"
	"sort"
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
	scores := make([]float64, len(cs))
	order := make([]int, len(cs))
	for i, c := range cs {
		order[i] = i
		scores[i] = score(c, key)
	}
	sort.Slice(order, func(a, b int) bool {
		if scores[order[a]] != scores[order[b]] {
			return scores[order[a]] > scores[order[b]]
		}
		return cs[order[a]].Node < cs[order[b]].Node
	})
	return order
}

// score is c's rendezvous score for key.
func score(c Candidate, key []byte) float64 {
	h := mix(fnv(fnv(offset64, []byte(c.Node)), key))
	u := (float64(h>>11) + 1) / (1 << 53) // (0, 1]
	w := c.Weight
	if w <= 0 {
		w = 1
	}
	return -w / math.Log(u) // ln(1) = 0: the best possible score, +Inf
}

const (
	offset64 = 14695981039346656037
	prime64  = 1099511628211
)

// fnv is FNV-1a over b from h, with a separator after it (so that node
// "ab" + key "c" differs from node "a" + key "bc").
func fnv(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= prime64
	}
	h ^= 0xff
	h *= prime64
	return h
}

// mix is splitmix64's finaliser: FNV's low bits are weak, and u is taken
// from the high ones.
func mix(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}
