package trace

// This file holds the offline bounds on the best any cache of a given
// capacity could do on a trace (Berger, Beckmann and Harchol-Balter,
// "Practical Bounds on Optimal Caching with Variable Object Sizes",
// SIGMETRICS 2018), for object hits and for byte hits:
//
//   - Belady-Size, a cache that knows the future: on a miss the object is
//     taken in, and while the cache is over capacity the object whose
//     next request is furthest away, weighed by its size for object hits
//     (a large object far in the future frees the most room for the
//     fewest hits), leaves (the object just asked for included: then it
//     was never worth keeping). The victim is the worst of a sample of 64
//     of the objects held, as in the paper's own implementation. It is a
//     cache that could run, so its hit ratio is at most the optimum's: a
//     lower bound.
//   - PFOO-L, an upper bound: every hit of any cache is an interval
//     between two requests for an object during which the cache held it,
//     which costs its size times the interval's length of the cache's
//     space-time (capacity times the trace's length in requests, all of
//     it). Taking the intervals by what they give per space-time, object
//     hits by 1 / (size × length), byte hits by 1 / length, until the
//     space-time is spent (the last one in part), gives at least as many
//     hits as any cache can have: the optimum lies between the two.
//
// Time is counted in requests, as the paper does.

import (
	"math"
	"math/rand/v2"
	"slices"
)

// Metric is what a bound is for.
type Metric int

const (
	Objects Metric = iota // object hit ratio
	Bytes                 // byte hit ratio
)

// nextUse is, for each request, the index of the next request for the
// same object (len(t.Requests) when there is none).
func nextUse(t *Trace) []int {
	n := len(t.Requests)
	next := make([]int, n)
	last := make(map[uint64]int, n/4)
	for i := n - 1; i >= 0; i-- {
		id := t.Requests[i].ID
		if j, ok := last[id]; ok {
			next[i] = j
		} else {
			next[i] = n
		}
		last[id] = i
	}
	return next
}

// PFOOL is the upper bound on the hit ratio of any cache of capacity
// bytes on t, for m.
func PFOOL(t *Trace, capacity int64, m Metric) Result {
	next := nextUse(t)
	n := len(t.Requests)
	type interval struct {
		cost float64 // size × length, byte-requests
		gain float64 // 1 hit, or size bytes
		size int64
	}
	var ivs []interval
	var r Result
	for i, q := range t.Requests {
		r.Requests++
		r.Bytes += q.Size
		if next[i] == n || q.Size > capacity {
			continue
		}
		// The object is asked for again with the same size: the hit is
		// at the next request (a size that changed is a miss there).
		if t.Requests[next[i]].Size != q.Size {
			continue
		}
		length := float64(next[i] - i)
		iv := interval{cost: float64(q.Size) * length, gain: 1, size: q.Size}
		if m == Bytes {
			iv.gain = float64(q.Size)
		}
		ivs = append(ivs, iv)
	}
	slices.SortFunc(ivs, func(a, b interval) int {
		// By gain per cost, best first (a × b' against b × a' avoids
		// dividing).
		x, y := a.gain*b.cost, b.gain*a.cost
		switch {
		case x > y:
			return -1
		case x < y:
			return 1
		}
		return 0
	})
	budget := float64(capacity) * float64(n)
	var hits, hitBytes float64
	for _, iv := range ivs {
		if budget <= 0 {
			break
		}
		part := 1.0
		if iv.cost > budget {
			part = budget / iv.cost
		}
		budget -= iv.cost * part
		hits += part
		hitBytes += part * float64(iv.size)
	}
	r.Hits, r.HitBytes = int(hits+0.5), int64(hitBytes+0.5)
	return r
}

// beladySample is how many held objects Belady-Size weighs for a victim.
const beladySample = 64

// BeladySize runs t through a cache of capacity bytes that knows each
// object's next request (see the file's comment), for m; seed fixes the
// samples.
func BeladySize(t *Trace, capacity int64, m Metric, seed uint64) Result {
	next := nextUse(t)
	n := len(t.Requests)
	type held struct {
		id   uint64
		size int64
		next int // the index of its next request
	}
	var objs []held           // the objects held, in no order
	where := map[uint64]int{} // id -> index in objs
	rng := rand.New(rand.NewPCG(seed, 0xbe1ad1))
	var used int64
	remove := func(k int) {
		used -= objs[k].size
		delete(where, objs[k].id)
		last := len(objs) - 1
		if k != last {
			objs[k] = objs[last]
			where[objs[k].id] = k
		}
		objs = objs[:last]
	}
	// worth is how much an object's place is worth keeping: the lower,
	// the sooner it goes.
	worth := func(h held, now int) float64 {
		d := float64(h.next - now)
		if h.next >= n {
			return math.Inf(-1) // never asked again: the first to go
		}
		if m == Objects {
			return -d * float64(h.size)
		}
		return -d
	}
	var r Result
	for i, q := range t.Requests {
		r.Requests++
		r.Bytes += q.Size
		if k, ok := where[q.ID]; ok {
			if objs[k].size == q.Size {
				r.Hits++
				r.HitBytes += q.Size
				objs[k].next = next[i]
				continue
			}
			remove(k) // another size: a miss
		}
		if q.Size > capacity || next[i] >= n {
			continue // never kept, or never asked again: no cache keeps it
		}
		where[q.ID] = len(objs)
		objs = append(objs, held{id: q.ID, size: q.Size, next: next[i]})
		used += q.Size
		for used > capacity {
			victim := -1
			if len(objs) <= beladySample {
				for k := range objs {
					if victim < 0 || worth(objs[k], i) < worth(objs[victim], i) {
						victim = k
					}
				}
			} else {
				for range beladySample {
					k := rng.IntN(len(objs))
					if victim < 0 || worth(objs[k], i) < worth(objs[victim], i) {
						victim = k
					}
				}
			}
			remove(victim)
		}
	}
	return r
}

// GapClosed is the share of the distance from LRU to the optimum that a
// policy's ratio covers: 0 for LRU's, 1 for the optimum's.
func GapClosed(policy, lru, optimum float64) float64 {
	if optimum <= lru {
		return 0
	}
	return (policy - lru) / (optimum - lru)
}
