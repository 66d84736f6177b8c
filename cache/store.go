package cache

// This file holds the memory store: sharded maps of Vary variants under a
// segmented LRU bounded in bytes.

import (
	"sync"
)

// store is the memory store: objects by primary key (each key's Vary
// variants side by side), bounded by their size in bytes, evicted by a
// segmented LRU. A new object enters the probation segment; a hit there
// promotes it to the protected segment (80% of the bytes), whose least
// recently used objects fall back to probation; eviction takes probation's
// least recently used. So one scan of cold objects cannot flush the ones
// that are hit again and again.
//
// The choice was measured (see the note in doc.go): on a Zipf trace this
// holds as many hits as otter's W-TinyLFU within a few per cent and more
// than ristretto, and unlike both it looks keys up by []byte without
// allocating and admits synchronously (a response stored is there for the
// next request, which cache semantics need). The lists are intrusive, so
// no operation allocates.
//
// A store is sharded by key hash; each shard has its own lock and its own
// share of the bytes.
type store struct {
	shards [nShards]shard
}

const nShards = 16

type shard struct {
	mu       sync.RWMutex
	byKey    map[string]*variants
	lru      slru[*Object]
	capacity int64 // bytes
	protCap  int64
	size     int64 // bytes stored (both segments)
	objects  int
	hot      int64 // bytes of hot copies stored (Cache.AdmitHot)
}

// variants are the stored responses of one primary key.
type variants struct {
	key  string
	list []*Object
}

func newStore(capacity int64) *store {
	s := &store{}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.byKey = make(map[string]*variants)
		sh.capacity = capacity / nShards
		sh.protCap = sh.capacity * 8 / 10
	}
	return s
}

func (s *store) shardOf(key []byte) *shard { return &s.shards[shardIndex(key)] }

// shardIndex is FNV-1a of the key, modulo the shards.
func shardIndex(key []byte) uint32 {
	h := uint32(2166136261)
	for _, c := range key {
		h ^= uint32(c)
		h *= 16777619
	}
	return h % nShards
}

// get returns the variant of key that answers r, recording the hit, and
// how many variants the key has. A complete response is preferred; a
// stored part answers only a range request it covers. The key is looked
// up without allocating.
func (s *store) get(key []byte, r *Request) (*Object, int) {
	sh := s.shardOf(key)
	// Lookups share the lock; only promoting an object, or refreshing a
	// hot one's recency (sampled: one hit in 16), takes it alone, so
	// concurrent hits on one hot object do not queue.
	sh.mu.RLock()
	o, n := sh.findLocked(key, r)
	touch := o != nil && (!o.links.protected || o.hits.Add(1)&15 == 0)
	sh.mu.RUnlock()
	if touch {
		sh.mu.Lock()
		if o.linked {
			sh.touchLocked(o)
		}
		sh.mu.Unlock()
	}
	return o, n
}

func (sh *shard) findLocked(key []byte, r *Request) (*Object, int) {
	vs := sh.byKey[string(key)]
	if vs == nil {
		return nil, 0
	}
	var part *Object
	for _, o := range vs.list {
		if !o.matches(r) {
			continue
		}
		if !o.partial {
			return o, len(vs.list)
		}
		if part == nil && r.Range != nil && o.covers(r) {
			part = o
		}
	}
	return part, len(vs.list)
}

// dropPartials removes the stored parts of o's variant once the whole
// response is stored.
func (s *store) dropPartials(o *Object) {
	sh := s.shardOf([]byte(o.Key))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	vs := sh.byKey[o.Key]
	if vs == nil {
		return
	}
	for i := 0; i < len(vs.list); {
		v := vs.list[i]
		if v.partial && v.secondary == o.secondary+"\x00partial" {
			sh.dropLocked(v)
			if sh.byKey[o.Key] == nil {
				return
			}
			continue
		}
		i++
	}
}

// resize changes the store's memory, evicting at once when it shrank.
func (s *store) resize(capacity int64) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.capacity = capacity / nShards
		sh.protCap = sh.capacity * 8 / 10
		sh.evictLocked()
		sh.mu.Unlock()
	}
}

// capacity is the store's memory.
func (s *store) capacity() int64 {
	var n int64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.capacity
		sh.mu.Unlock()
	}
	return n
}

func (sh *shard) touchLocked(o *Object) { sh.lru.touch(o, sh.protCap) }

// fits reports whether an object of size bytes under key could be
// stored at all (it is not larger than its shard's share).
func (s *store) fits(key string, size int64) bool {
	sh := &s.shards[shardIndex([]byte(key))]
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return size <= sh.capacity
}

// put stores o under its key, replacing a variant with the same secondary
// key, and evicts until the shard fits. An object larger than the shard is
// not stored.
func (s *store) put(o *Object) bool {
	sh := s.shardOf([]byte(o.Key))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if o.Size > sh.capacity {
		return false
	}
	vs := sh.byKey[o.Key]
	if vs == nil {
		vs = &variants{key: o.Key}
		sh.byKey[o.Key] = vs
	}
	for i, old := range vs.list {
		if old.secondary == o.secondary {
			sh.unlinkLocked(old)
			vs.list[i] = o
			sh.linkLocked(o)
			sh.evictLocked()
			return true
		}
	}
	if len(vs.list) >= maxVariants {
		// A URL whose Vary spreads it over many variants (a field the
		// client chooses freely) keeps the newest maxVariants: the lookup
		// is a scan of them, and thousands made every hit slow.
		sh.dropLocked(vs.list[0])
		if sh.byKey[o.Key] == nil {
			sh.byKey[o.Key] = vs
		}
	}
	vs.list = append(vs.list, o)
	sh.linkLocked(o)
	sh.evictLocked()
	return true
}

// maxVariants bounds the Vary variants stored for one URL.
const maxVariants = 64

func (sh *shard) linkLocked(o *Object) {
	o.linked = true
	sh.lru.add(o)
	sh.size += o.Size
	sh.objects++
	if o.hot {
		sh.hot += o.Size
	}
}

func (sh *shard) unlinkLocked(o *Object) {
	o.linked = false
	sh.lru.remove(o)
	sh.size -= o.Size
	sh.objects--
	if o.hot {
		sh.hot -= o.Size
	}
}

func (sh *shard) evictLocked() {
	for sh.size > sh.capacity {
		victim := sh.lru.victim()
		if victim == nil {
			return
		}
		sh.dropLocked(victim)
	}
}

// dropLocked removes one object from the shard.
func (sh *shard) dropLocked(o *Object) {
	sh.unlinkLocked(o)
	vs := sh.byKey[o.Key]
	if vs == nil {
		return
	}
	for i, v := range vs.list {
		if v == o {
			vs.list = append(vs.list[:i], vs.list[i+1:]...)
			break
		}
	}
	if len(vs.list) == 0 {
		delete(sh.byKey, o.Key)
	}
}

// remove drops o if it is still stored.
func (s *store) remove(o *Object) {
	sh := s.shardOf([]byte(o.Key))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if vs := sh.byKey[o.Key]; vs != nil {
		for _, v := range vs.list {
			if v == o {
				sh.dropLocked(o)
				return
			}
		}
	}
}

// purge drops every variant of key and reports how many there were.
func (s *store) purge(key []byte) int {
	sh := s.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	vs := sh.byKey[string(key)]
	if vs == nil {
		return 0
	}
	n := len(vs.list)
	for len(vs.list) > 0 {
		sh.dropLocked(vs.list[0])
	}
	return n
}

// stats sums the shards.
func (s *store) stats() (objects int, bytes int64) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		objects += sh.objects
		bytes += sh.size
		sh.mu.Unlock()
	}
	return objects, bytes
}

// hotBytes is the bytes of hot copies stored.
func (s *store) hotBytes() int64 {
	var n int64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.RLock()
		n += sh.hot
		sh.mu.RUnlock()
	}
	return n
}
