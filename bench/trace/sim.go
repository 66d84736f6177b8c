package trace

// This file holds the simulated caches: LRU, GDSF and S3-FIFO over the
// same bytes, with no overhead per object, as the textbooks define them.
// A cache holds at most its capacity in bytes of bodies; an object larger
// than the capacity is never kept.

import (
	"container/heap"
	"container/list"
)

// Policy is a simulated cache: Get reports whether id (of size bytes) was
// a hit, and keeps it (or not) by the policy's rules.
type Policy interface {
	Name() string
	Get(id uint64, size int64) bool
}

// Result is what a run of a trace through a cache came to.
type Result struct {
	Requests, Hits  int
	Bytes, HitBytes int64
}

// ObjectHitRatio is hits / requests.
func (r Result) ObjectHitRatio() float64 { return ratio(float64(r.Hits), float64(r.Requests)) }

// ByteHitRatio is bytes served from the cache / bytes asked for.
func (r Result) ByteHitRatio() float64 { return ratio(float64(r.HitBytes), float64(r.Bytes)) }

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// Simulate runs t through p.
func Simulate(p Policy, t *Trace) Result {
	var r Result
	for _, q := range t.Requests {
		r.Requests++
		r.Bytes += q.Size
		if p.Get(q.ID, q.Size) {
			r.Hits++
			r.HitBytes += q.Size
		}
	}
	return r
}

// Policies are the simulated caches of capacity bytes, by name.
func Policies(capacity int64) []Policy {
	return []Policy{NewLRU(capacity), NewGDSF(capacity), NewS3FIFO(capacity)}
}

// ------------------------------------------------------------------ LRU

type lruEntry struct {
	id   uint64
	size int64
}

// LRU evicts the least recently used object.
type LRU struct {
	capacity, size int64
	order          *list.List // most recent first
	byID           map[uint64]*list.Element
}

func NewLRU(capacity int64) *LRU {
	return &LRU{capacity: capacity, order: list.New(), byID: map[uint64]*list.Element{}}
}

func (c *LRU) Name() string { return "LRU" }

func (c *LRU) Get(id uint64, size int64) bool {
	if e, ok := c.byID[id]; ok {
		if e.Value.(*lruEntry).size == size {
			c.order.MoveToFront(e)
			return true
		}
		c.drop(e)
	}
	if size > c.capacity {
		return false
	}
	c.byID[id] = c.order.PushFront(&lruEntry{id, size})
	c.size += size
	for c.size > c.capacity {
		c.drop(c.order.Back())
	}
	return false
}

func (c *LRU) drop(e *list.Element) {
	v := e.Value.(*lruEntry)
	c.order.Remove(e)
	delete(c.byID, v.id)
	c.size -= v.size
}

// ----------------------------------------------------------------- GDSF

// GDSF is Greedy-Dual-Size-Frequency (Cherkasova 1998) with a cost of 1
// per object: each object's priority is L + frequency / size, the
// victim is the lowest, and L rises to each victim's priority, so
// objects not asked for again age out. It favours small, often asked
// objects: the policy with the best object hit ratio of the classics.
type GDSF struct {
	capacity, size int64
	clock          float64
	h              gdsfHeap
	byID           map[uint64]*gdsfEntry
}

type gdsfEntry struct {
	id    uint64
	size  int64
	freq  float64
	prio  float64
	index int
}

type gdsfHeap []*gdsfEntry

func (h gdsfHeap) Len() int           { return len(h) }
func (h gdsfHeap) Less(i, j int) bool { return h[i].prio < h[j].prio }
func (h gdsfHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *gdsfHeap) Push(x any)        { e := x.(*gdsfEntry); e.index = len(*h); *h = append(*h, e) }
func (h *gdsfHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

func NewGDSF(capacity int64) *GDSF {
	return &GDSF{capacity: capacity, byID: map[uint64]*gdsfEntry{}}
}

func (c *GDSF) Name() string { return "GDSF" }

func (c *GDSF) Get(id uint64, size int64) bool {
	if e, ok := c.byID[id]; ok {
		if e.size == size {
			e.freq++
			e.prio = c.clock + e.freq/float64(e.size)
			heap.Fix(&c.h, e.index)
			return true
		}
		heap.Remove(&c.h, e.index)
		delete(c.byID, id)
		c.size -= e.size
	}
	if size > c.capacity {
		return false
	}
	e := &gdsfEntry{id: id, size: size, freq: 1}
	e.prio = c.clock + 1/float64(size)
	heap.Push(&c.h, e)
	c.byID[id] = e
	c.size += size
	for c.size > c.capacity {
		v := heap.Pop(&c.h).(*gdsfEntry)
		c.clock = v.prio
		delete(c.byID, v.id)
		c.size -= v.size
	}
	return false
}

// -------------------------------------------------------------- S3-FIFO

// S3FIFO is S3-FIFO (Yang et al., SOSP 2023) over bytes: a small FIFO
// (a tenth of the bytes) that new objects enter, a main FIFO, and a ghost
// FIFO of the ids recently evicted from the small one. An object hit
// while in the small FIFO moves to the main one when it reaches the tail;
// one never hit is evicted and remembered in the ghost, and comes back
// straight into the main FIFO. The main FIFO gives an object with hits
// another round (a hit count of at most 3, less one per round).
type S3FIFO struct {
	capacity, smallCap int64
	small, main        fifo
	ghost              *list.List // of ids, newest first
	ghostIDs           map[uint64]*list.Element
	byID               map[uint64]*s3Entry
}

type s3Entry struct {
	id     uint64
	size   int64
	freq   int
	inMain bool
	elem   *list.Element
}

type fifo struct {
	l    *list.List // newest first
	size int64
}

func NewS3FIFO(capacity int64) *S3FIFO {
	return &S3FIFO{capacity: capacity, smallCap: capacity / 10, small: fifo{l: list.New()}, main: fifo{l: list.New()},
		ghost: list.New(), ghostIDs: map[uint64]*list.Element{}, byID: map[uint64]*s3Entry{}}
}

func (c *S3FIFO) Name() string { return "S3-FIFO" }

func (c *S3FIFO) Get(id uint64, size int64) bool {
	if e, ok := c.byID[id]; ok {
		if e.size == size {
			e.freq = min(e.freq+1, 3)
			return true
		}
		c.remove(e)
	}
	if size > c.capacity {
		return false
	}
	e := &s3Entry{id: id, size: size}
	if g, ok := c.ghostIDs[id]; ok {
		c.ghost.Remove(g)
		delete(c.ghostIDs, id)
		e.inMain = true
		e.elem = c.main.l.PushFront(e)
		c.main.size += size
	} else {
		e.elem = c.small.l.PushFront(e)
		c.small.size += size
	}
	c.byID[id] = e
	for c.small.size+c.main.size > c.capacity {
		if c.small.size > c.smallCap || c.main.l.Len() == 0 {
			c.evictSmall()
		} else {
			c.evictMain()
		}
	}
	return false
}

func (c *S3FIFO) evictSmall() {
	e := c.small.l.Back().Value.(*s3Entry)
	c.small.l.Remove(e.elem)
	c.small.size -= e.size
	if e.freq > 0 {
		e.freq, e.inMain = 0, true
		e.elem = c.main.l.PushFront(e)
		c.main.size += e.size
		return
	}
	delete(c.byID, e.id)
	c.ghostIDs[e.id] = c.ghost.PushFront(e.id)
	// The ghost remembers as many ids as the main FIFO holds objects.
	for c.ghost.Len() > max(c.main.l.Len(), 1) {
		old := c.ghost.Back()
		c.ghost.Remove(old)
		delete(c.ghostIDs, old.Value.(uint64))
	}
}

func (c *S3FIFO) evictMain() {
	for {
		e := c.main.l.Back().Value.(*s3Entry)
		c.main.l.Remove(e.elem)
		if e.freq > 0 {
			e.freq--
			e.elem = c.main.l.PushFront(e)
			continue
		}
		c.main.size -= e.size
		delete(c.byID, e.id)
		return
	}
}

func (c *S3FIFO) remove(e *s3Entry) {
	q := &c.small
	if e.inMain {
		q = &c.main
	}
	q.l.Remove(e.elem)
	q.size -= e.size
	delete(c.byID, e.id)
}
