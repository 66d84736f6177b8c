package cache

// This file holds the memory store's eviction and admission policy: a
// small FIFO that new objects enter (a quarter of the bytes), a main
// region evicted by sampled Greedy-Dual-Size-Frequency, and a ghost of the
// keys the small FIFO let go unasked, so that one asked for again soon
// goes straight to the main region.
//
// Why this shape (measured with bench/trace on the web12 trace and a Zipf
// trace with scans; see docs/benchmarks.md "Hit ratios"):
//   - the small FIFO with its ghost (S3-FIFO's quick demotion) keeps the
//     objects asked for once, which are most of a forward proxy's, from
//     pushing out the ones asked for again;
//   - in the main region, an object's priority is the clock at its last
//     hit plus its hits over the square root of its size: between GDSF
//     (hits over size: the most hits, the fewest bytes) and LFU (hits:
//     the most bytes), so small objects are favoured without giving up
//     the large popular ones;
//   - the victim is the lowest of 16 objects drawn at random from the
//     main region (as Redis samples), so a hit only bumps two atomics on
//     the object and takes no lock, and admission is O(1).
//
// Objects are sized in bytes (body, head and overhead), and one is kept
// when it fits in the whole memory: there is no per-shard share.

import (
	"math"
	"sync"
	"sync/atomic"
)

const (
	// smallShare is the small FIFO's share of the bytes.
	smallShare = 4 // a quarter
	// samples is how many main objects an eviction compares.
	samples = 16
	// minGhost is the fewest keys the ghost remembers.
	minGhost = 64
)

// pol is an object's place in the policy. Its fields are under
// policy.mu, but for freq and base, which hits update without a lock.
type pol struct {
	mainAt int32 // index in policy.main; -1 when not there
	linked bool  // counted in the policy (small or main)
	// gone: removed from its shard's map, never to be linked (set under
	// the shard lock, read under policy.mu).
	gone atomic.Bool
	freq atomic.Uint32 // requests while stored (1 at admission)
	base atomic.Uint64 // the clock at the last one (float64 bits)
}

// policy is the store's accounting and eviction, one for all its shards.
type policy struct {
	mu       sync.Mutex
	capacity atomic.Int64
	clock    atomic.Uint64 // GDSF's inflation L (float64 bits)
	small    objFIFO
	main     []*Object
	size     int64 // bytes linked (small and main)
	objects  int
	hot      int64 // bytes of hot copies linked
	ghost    ghost
	rnd      uint64
}

func (p *policy) init(capacity int64) {
	p.capacity.Store(capacity)
	p.rnd = 0x9e3779b97f4a7c15
	p.ghost.in = map[uint64]uint32{}
}

// hit records a request answered by o: no lock, and the clock written
// only when it moved (hits on a hot object share its cache line).
func (p *policy) hit(o *Object) {
	o.pol.freq.Add(1)
	if c := p.clock.Load(); o.pol.base.Load() != c {
		o.pol.base.Store(c)
	}
}

// admit links o (unless it left its shard meanwhile, or is linked
// already), unlinks the objects it replaced, and evicts until the
// memory holds; it returns the victims, for the caller to take out of
// their shards (without holding the policy's lock).
func (p *policy) admit(o *Object, replaced []*Object, victims []*Object) []*Object {
	p.mu.Lock()
	defer p.mu.Unlock()
	// A new version of a stored object (a refresh, a new fetch) keeps
	// its requests and its region.
	freq, wasMain := uint32(1), false
	for _, r := range replaced {
		if r.pol.linked {
			freq, wasMain = max(freq, r.pol.freq.Load()), wasMain || r.pol.mainAt >= 0
		}
		p.unlinkLocked(r)
	}
	if !o.pol.linked && !o.pol.gone.Load() {
		o.pol.freq.Store(freq)
		o.pol.base.Store(p.clock.Load())
		o.pol.mainAt = -1
		if wasMain || p.ghost.take(o.hashOf()) {
			p.toMainLocked(o)
		} else {
			p.small.pushFront(o)
		}
		p.countLocked(o, 1)
	}
	return p.evictLocked(victims)
}

// unlink takes o out of the policy (it left its shard).
func (p *policy) unlink(os ...*Object) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, o := range os {
		p.unlinkLocked(o)
	}
}

// resize sets the memory and evicts what no longer fits.
func (p *policy) resize(capacity int64) []*Object {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.capacity.Store(capacity)
	return p.evictLocked(nil)
}

func (p *policy) unlinkLocked(o *Object) {
	if !o.pol.linked {
		return
	}
	if o.pol.mainAt >= 0 {
		p.removeMainLocked(o)
	} else {
		p.small.remove(o)
	}
	p.countLocked(o, -1)
}

func (p *policy) countLocked(o *Object, sign int64) {
	o.pol.linked = sign > 0
	p.size += sign * o.Size
	p.objects += int(sign)
	if o.hot {
		p.hot += sign * o.Size
	}
}

func (p *policy) toMainLocked(o *Object) {
	o.pol.mainAt = int32(len(p.main))
	p.main = append(p.main, o)
}

func (p *policy) removeMainLocked(o *Object) {
	i := o.pol.mainAt
	last := p.main[len(p.main)-1]
	p.main[i] = last
	last.pol.mainAt = i
	p.main[len(p.main)-1] = nil
	p.main = p.main[:len(p.main)-1]
	o.pol.mainAt = -1
}

// evictLocked evicts until the linked bytes fit: from the small FIFO
// while it holds more than its share (an object asked for again while
// there moves to the main region instead; one that was not is
// remembered in the ghost), else the lowest priority of samples main
// objects.
func (p *policy) evictLocked(victims []*Object) []*Object {
	capacity := p.capacity.Load()
	for p.size > capacity {
		var v *Object
		if p.small.size > capacity/smallShare || len(p.main) == 0 {
			t := p.small.tail
			if t == nil {
				break
			}
			p.small.remove(t)
			if t.pol.freq.Load() > 1 {
				p.toMainLocked(t)
				continue
			}
			p.ghost.add(t.hashOf(), max(len(p.main), minGhost))
			v = t
		} else {
			v = p.sampleLocked()
			p.clock.Store(math.Float64bits(priority(v)))
			p.removeMainLocked(v)
		}
		p.countLocked(v, -1)
		victims = append(victims, v)
	}
	return victims
}

// sampleLocked is the lowest priority of samples main objects drawn at
// random (every one when there are fewer).
func (p *policy) sampleLocked() *Object {
	n := len(p.main)
	if n <= samples {
		v := p.main[0]
		for _, o := range p.main[1:] {
			if priority(o) < priority(v) {
				v = o
			}
		}
		return v
	}
	var v *Object
	low := math.Inf(1)
	for range samples {
		p.rnd ^= p.rnd << 13
		p.rnd ^= p.rnd >> 7
		p.rnd ^= p.rnd << 17
		o := p.main[p.rnd%uint64(n)]
		if pr := priority(o); pr < low {
			v, low = o, pr
		}
	}
	return v
}

// priority is o's worth in the main region: the clock at its last
// request plus its requests over the square root of its size.
func priority(o *Object) float64 {
	return math.Float64frombits(o.pol.base.Load()) + float64(o.pol.freq.Load())/math.Sqrt(float64(max(o.Size, 1)))
}

// ghost remembers the hashes of the keys the small FIFO evicted unasked,
// oldest first, up to a bound (the main region's objects).
type ghost struct {
	in    map[uint64]uint32 // hash -> times in the queue
	queue []uint64
	head  int
}

func (g *ghost) add(h uint64, bound int) {
	g.in[h]++
	g.queue = append(g.queue, h)
	for len(g.queue)-g.head > bound {
		old := g.queue[g.head]
		g.head++
		if c := g.in[old]; c > 1 {
			g.in[old] = c - 1
		} else {
			delete(g.in, old) // (or taken already)
		}
	}
	if g.head > 1024 && g.head*2 > len(g.queue) {
		g.queue = append(g.queue[:0], g.queue[g.head:]...)
		g.head = 0
	}
}

// take reports whether h is remembered, and forgets it.
func (g *ghost) take(h uint64) bool {
	if g.in[h] == 0 {
		return false
	}
	if g.in[h]--; g.in[h] == 0 {
		delete(g.in, h)
	}
	return true
}
