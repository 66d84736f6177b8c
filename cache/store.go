package cache

// This file holds the memory store: sharded maps of Vary variants, by
// the key's hash, bounded in bytes by one policy (policy.go).

import (
	"hash/maphash"
	"slices"
	"sync"
)

// store is the memory store: objects by primary key (each key's Vary
// variants side by side) in maps sharded by key hash, each with its own
// lock, and one policy (policy.go) that bounds them in bytes and chooses
// what to evict. A hit takes its shard's read lock and no other; storing
// takes the shard's lock, then the policy's, never both at once.
//
// The maps are keyed by the key's 64-bit hash, made once per lookup or
// store and kept in the object (its shard, its map place, its ghost
// entry after eviction all come from it): with string keys each of a
// miss's map operations hashed and compared the key again. Keys sharing
// a hash (as good as never) are chained, and every lookup compares the
// key itself.
type store struct {
	shards [nShards]shard
	pol    policy
}

const nShards = 16

type shard struct {
	mu    sync.RWMutex
	byKey map[uint64]*variants // by keyHashOf
}

// variants are the stored responses of one primary key.
type variants struct {
	key  string
	next *variants // another key with the same hash
	list []*Object
	one  [1]*Object // list's first backing: most URLs have one variant, stored without a second allocation
}

func newStore(capacity int64) *store {
	s := &store{}
	for i := range s.shards {
		s.shards[i].byKey = make(map[uint64]*variants)
	}
	s.pol.init(capacity)
	return s
}

func (s *store) shardOf(h uint64) *shard { return &s.shards[h%nShards] }

// keyHashOf is the store's hash of a key (the runtime's, with a seed
// made at start: a byte-at-a-time hash took a tenth of a lookup and
// admission).
func keyHashOf(key []byte) uint64 { return maphash.Bytes(storeSeed, key) }

// hashOf is o's key hash, made when it is first stored (a hash that
// comes to 0 is made each time: still right).
func (o *Object) hashOf() uint64 {
	if h := o.hash.Load(); h != 0 {
		return h
	}
	h := maphash.String(storeSeed, o.Key)
	o.hash.Store(h)
	return h
}

var storeSeed = maphash.MakeSeed()

// shardIndex is key's shard, for the structures sharded as the store
// is (flights, hit counters).
func shardIndex(key []byte) uint32 { return uint32(keyHashOf(key) % nShards) }

// find is the variants of key (hash h), or nil.
func (sh *shard) find(h uint64, key string) *variants {
	vs := sh.byKey[h]
	for vs != nil && vs.key != key {
		vs = vs.next
	}
	return vs
}

// forget takes vs (empty now) out of the map.
func (sh *shard) forget(h uint64, vs *variants) {
	first := sh.byKey[h]
	if first == vs {
		if vs.next == nil {
			delete(sh.byKey, h)
		} else {
			sh.byKey[h] = vs.next
		}
		return
	}
	for p := first; p != nil; p = p.next {
		if p.next == vs {
			p.next = vs.next
			return
		}
	}
}

// get returns the variant of key that answers r, recording the hit, and
// how many variants the key has. A complete response is preferred; a
// stored part answers only a range request it covers. The key is looked
// up without allocating.
func (s *store) get(key []byte, r *Request) (*Object, int) {
	h := keyHashOf(key)
	sh := s.shardOf(h)
	sh.mu.RLock()
	o, n := sh.findLocked(h, key, r)
	sh.mu.RUnlock()
	if o != nil {
		s.pol.hit(o)
	}
	return o, n
}

func (sh *shard) findLocked(h uint64, key []byte, r *Request) (*Object, int) {
	vs := sh.find(h, string(key))
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
	h := o.hashOf()
	sh := s.shardOf(h)
	var gone []*Object
	sh.mu.Lock()
	if vs := sh.find(h, o.Key); vs != nil {
		for _, v := range vs.list {
			if v.partial && v.secondary == o.secondary+"\x00partial" {
				gone = append(gone, v)
			}
		}
		for _, v := range gone {
			sh.dropLocked(v)
		}
	}
	sh.mu.Unlock()
	s.pol.unlink(gone...)
}

// resize changes the store's memory, evicting at once when it shrank.
func (s *store) resize(capacity int64) { s.drop(s.pol.resize(capacity)) }

// capacity is the store's memory.
func (s *store) capacity() int64 { return s.pol.capacity.Load() }

// fits reports whether an object of size bytes could be stored at all
// (it is not larger than the memory).
func (s *store) fits(_ string, size int64) bool { return size <= s.capacity() }

// put stores o under its key, replacing a variant with the same secondary
// key, and evicts until the memory holds it. An object larger than the
// memory is not stored.
func (s *store) put(o *Object) bool {
	if o.Size > s.capacity() {
		return false
	}
	h := o.hashOf()
	sh := s.shardOf(h)
	var buf [2]*Object
	replaced := buf[:0]
	sh.mu.Lock()
	vs := sh.find(h, o.Key)
	if vs == nil {
		vs = &variants{key: o.Key, next: sh.byKey[h]}
		vs.list = vs.one[:0]
		sh.byKey[h] = vs
	}
	o.pol.gone.Store(false)
	i := slices.IndexFunc(vs.list, func(v *Object) bool { return v.secondary == o.secondary })
	switch {
	case i >= 0:
		if old := vs.list[i]; old != o {
			old.pol.gone.Store(true)
			replaced = append(replaced, old)
			vs.list[i] = o
		}
	case len(vs.list) >= maxVariants:
		// A URL whose Vary spreads it over many variants (a field the
		// client chooses freely) keeps the newest maxVariants: the lookup
		// is a scan of them, and thousands made every hit slow.
		old := vs.list[0]
		old.pol.gone.Store(true)
		replaced = append(replaced, old)
		vs.list = append(vs.list[1:], o)
	default:
		vs.list = append(vs.list, o)
	}
	sh.mu.Unlock()
	var vbuf [4]*Object
	s.drop(s.pol.admit(o, replaced, vbuf[:0]))
	return true
}

// maxVariants bounds the Vary variants stored for one URL.
const maxVariants = 64

// drop takes the policy's victims out of their shards (each if it is
// still there: it may have been replaced or purged meanwhile).
func (s *store) drop(victims []*Object) {
	for _, v := range victims {
		sh := s.shardOf(v.hashOf())
		sh.mu.Lock()
		sh.dropLocked(v)
		sh.mu.Unlock()
	}
}

// dropLocked removes o from the shard's map, if it is there, and marks it
// gone (the policy is told by the caller).
func (sh *shard) dropLocked(o *Object) {
	o.pol.gone.Store(true)
	h := o.hashOf()
	vs := sh.find(h, o.Key)
	if vs == nil {
		return
	}
	if i := slices.Index(vs.list, o); i >= 0 {
		vs.list = slices.Delete(vs.list, i, i+1)
	}
	if len(vs.list) == 0 {
		sh.forget(h, vs)
	}
}

// remove drops o if it is still stored.
func (s *store) remove(o *Object) {
	sh := s.shardOf(o.hashOf())
	sh.mu.Lock()
	sh.dropLocked(o)
	sh.mu.Unlock()
	s.pol.unlink(o)
}

// purge drops every variant of key and reports how many there were.
func (s *store) purge(key []byte) int {
	h := keyHashOf(key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	vs := sh.find(h, string(key))
	if vs == nil {
		sh.mu.Unlock()
		return 0
	}
	gone := slices.Clone(vs.list)
	for _, o := range gone {
		sh.dropLocked(o)
	}
	sh.mu.Unlock()
	s.pol.unlink(gone...)
	return len(gone)
}

// stats is the objects and bytes stored.
func (s *store) stats() (objects int, bytes int64) {
	s.pol.mu.Lock()
	defer s.pol.mu.Unlock()
	return s.pol.objects, s.pol.size
}

// hotBytes is the bytes of hot copies stored.
func (s *store) hotBytes() int64 {
	s.pol.mu.Lock()
	defer s.pol.mu.Unlock()
	return s.pol.hot
}
