package trace

import (
	"math/bits"
	"math/rand/v2"
	"testing"
)

// TestBoundsHoldEveryPolicy: on random traces of mixed sizes, no cache
// the bench simulates (LRU, GDSF, S3-FIFO, Belady-Size itself) beats
// PFOO-L, for object hits or byte hits: it is an upper bound. Belady-Size,
// knowing the future, beats LRU.
func TestBoundsHoldEveryPolicy(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		tr := Zipf(20000, 2000, 1.05, 2000, 100, seed)
		_, footprint := tr.Footprint()
		for _, pct := range []int64{1, 5, 10} {
			capacity := footprint * pct / 100
			upO, upB := PFOOL(tr, capacity, Objects), PFOOL(tr, capacity, Bytes)
			beO, beB := BeladySize(tr, capacity, Objects, seed), BeladySize(tr, capacity, Bytes, seed)
			lru := Simulate(NewLRU(capacity), tr)
			for _, p := range append(Policies(capacity), nil) {
				r, name := beO, "Belady-Size (objects)"
				if p != nil {
					r, name = Simulate(p, tr), p.Name()
				}
				if r.ObjectHitRatio() > upO.ObjectHitRatio()+1e-9 {
					t.Errorf("seed %d, %d%%: %s's object hit ratio %.4f over the upper bound %.4f", seed, pct, name, r.ObjectHitRatio(), upO.ObjectHitRatio())
				}
				if p != nil && r.ByteHitRatio() > upB.ByteHitRatio()+1e-9 {
					t.Errorf("seed %d, %d%%: %s's byte hit ratio %.4f over the upper bound %.4f", seed, pct, name, r.ByteHitRatio(), upB.ByteHitRatio())
				}
			}
			if beB.ByteHitRatio() > upB.ByteHitRatio()+1e-9 {
				t.Errorf("seed %d, %d%%: Belady-Size's byte hit ratio %.4f over the upper bound %.4f", seed, pct, beB.ByteHitRatio(), upB.ByteHitRatio())
			}
			if beO.ObjectHitRatio() <= lru.ObjectHitRatio() || beB.ByteHitRatio() <= lru.ByteHitRatio() {
				t.Errorf("seed %d, %d%%: Belady-Size %.4f / %.4f does not beat LRU %.4f / %.4f", seed, pct,
					beO.ObjectHitRatio(), beB.ByteHitRatio(), lru.ObjectHitRatio(), lru.ByteHitRatio())
			}
		}
	}
}

// TestBeladyIsOptimalForUnitSizes: with every object of one size,
// Belady's rule (the furthest next request goes) is the optimum, which a
// brute force over every choice finds on small random traces; PFOO-L is
// at or above it.
func TestBeladyIsOptimalForUnitSizes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 200 {
		n, k, capacity := 8+rng.IntN(6), 2+rng.IntN(4), int64(1+rng.IntN(3))
		tr := &Trace{}
		for range n {
			tr.Requests = append(tr.Requests, Request{ID: uint64(rng.IntN(k)), Size: 1})
		}
		best := bruteForce(tr, capacity)
		got := BeladySize(tr, capacity, Objects, 1).Hits
		if got != best {
			t.Fatalf("round %d: Belady %d hits, the optimum %d, on %v with capacity %d", round, got, best, tr.Requests, capacity)
		}
		if up := PFOOL(tr, capacity, Objects).Hits; up < best {
			t.Fatalf("round %d: PFOO-L %d hits under the optimum %d", round, up, best)
		}
	}
}

// bruteForce is the most hits any demand cache of capacity unit objects
// gets on tr (ids below 8): every choice of what to keep after each
// request, memoized by position and what is held.
func bruteForce(tr *Trace, capacity int64) int {
	memo := map[[2]int]int{}
	var walk func(i, held int) int
	walk = func(i, held int) int {
		if i == len(tr.Requests) {
			return 0
		}
		if v, ok := memo[[2]int{i, held}]; ok {
			return v
		}
		id := 1 << tr.Requests[i].ID
		hit := 0
		if held&id != 0 {
			hit = 1
		}
		// After the request the cache holds any subset of what it held
		// and id, within capacity.
		all, best := held|id, 0
		for sub := all; ; sub = (sub - 1) & all {
			if int64(bits.OnesCount(uint(sub))) <= capacity {
				best = max(best, walk(i+1, sub))
			}
			if sub == 0 {
				break
			}
		}
		memo[[2]int{i, held}] = hit + best
		return hit + best
	}
	return walk(0, 0)
}
