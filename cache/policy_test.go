package cache

import (
	"fmt"
	"sync"
	"testing"
)

// obj is a stored object of size bytes under key, as the store sees it.
func obj(key string, size int64) *Object { return &Object{Key: key, Size: size} }

// ask is a request through the store: a hit, or a miss that stores it.
func ask(s *store, key string, size int64) bool {
	if o, _ := s.get([]byte(key), &Request{}); o != nil {
		return true
	}
	s.put(obj(key, size))
	return false
}

// TestPolicyKeepsAHotSetThroughAScan: objects asked for again and again
// stay while a crawler walks through ten times the memory once.
func TestPolicyKeepsAHotSetThroughAScan(t *testing.T) {
	s := newStore(100 << 10)
	for round := 0; round < 3; round++ {
		for i := 0; i < 20; i++ {
			ask(s, fmt.Sprintf("hot/%d", i), 1<<10)
		}
	}
	for i := 0; i < 1000; i++ {
		ask(s, fmt.Sprintf("scan/%d", i), 1<<10)
	}
	kept := 0
	for i := 0; i < 20; i++ {
		if ask(s, fmt.Sprintf("hot/%d", i), 1<<10) {
			kept++
		}
	}
	if kept < 19 {
		t.Fatalf("%d of 20 hot objects kept through a scan of 1000; want the hot set kept", kept)
	}
	if objects, bytes := s.stats(); bytes > 100<<10 || objects > 100 {
		t.Fatalf("%d objects, %d bytes stored in 100 KiB", objects, bytes)
	}
}

// TestPolicyFavoursSmallObjects: with room for either the ten small
// objects or the large one, equally asked for, the small ones stay: ten
// hits where the large one gives one.
func TestPolicyFavoursSmallObjects(t *testing.T) {
	s := newStore(64 << 10)
	hits := map[string]int{}
	for round := 0; round < 50; round++ {
		for i := 0; i < 10; i++ {
			k := fmt.Sprintf("small/%d", i)
			if ask(s, k, 2<<10) {
				hits["small"]++
			}
		}
		k := fmt.Sprintf("large/%d", round%2)
		if ask(s, k, 40<<10) {
			hits["large"]++
		}
	}
	if hits["small"] < 400 {
		t.Fatalf("hits: %v; want the small objects kept (>= 400 of 500)", hits)
	}
}

// TestPolicyGhostRemembersWhatWasLetGo: an object the small FIFO let go
// unasked, asked for again soon, goes straight to the main region and
// survives the next burst of new objects, which a second chance in the
// small FIFO would not.
func TestPolicyGhostRemembersWhatWasLetGo(t *testing.T) {
	s := newStore(40 << 10)
	for round := 0; round < 2; round++ { // 20 objects asked twice: the main region
		for i := 0; i < 20; i++ {
			ask(s, fmt.Sprintf("main/%d", i), 1<<10)
		}
	}
	for i := 0; i < 30; i++ { // the small FIFO fills
		ask(s, fmt.Sprintf("new/%d", i), 1<<10)
	}
	ask(s, "again", 1<<10)
	for i := 30; i < 60; i++ {
		ask(s, fmt.Sprintf("new/%d", i), 1<<10)
	}
	if ask(s, "again", 1<<10) {
		t.Fatal("still stored after 30 new objects went through the small FIFO")
	}
	for i := 60; i < 300; i++ {
		ask(s, fmt.Sprintf("new/%d", i), 1<<10)
	}
	if !ask(s, "again", 1<<10) {
		t.Fatal("asked for again after the small FIFO let it go, and lost to the next 240 new objects")
	}
}

// TestPolicyAccountsUnderChurn: puts, replacements, purges and hits from
// many goroutines leave the books equal to what the shards hold, within
// the memory.
func TestPolicyAccountsUnderChurn(t *testing.T) {
	s := newStore(256 << 10)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 3000; i++ {
				k := fmt.Sprintf("k/%d", (i*7+g*13)%500)
				switch i % 5 {
				case 0:
					s.purge([]byte(k))
				case 1:
					s.put(obj(k, int64(1<<10+i%4096))) // a new version
				default:
					ask(s, k, int64(1<<10+g*100))
				}
			}
		}()
	}
	wg.Wait()
	objects, bytes := s.stats()
	var inMaps int
	var mapBytes int64
	for i := range s.shards {
		for _, first := range s.shards[i].byKey {
			for vs := first; vs != nil; vs = vs.next {
				for _, o := range vs.list {
					inMaps++
					mapBytes += o.Size
				}
			}
		}
	}
	if objects != inMaps || bytes != mapBytes || bytes > 256<<10 {
		t.Fatalf("the policy counts %d objects, %d bytes; the shards hold %d, %d bytes (memory 256 KiB)", objects, bytes, inMaps, mapBytes)
	}
	s.resize(64 << 10)
	if _, bytes := s.stats(); bytes > 64<<10 {
		t.Fatalf("%d bytes after shrinking to 64 KiB", bytes)
	}
}

// BenchmarkStoreLookupAndAdmit is a lookup that misses plus the admission
// of the object (with its eviction), then a hit: the store's per-request
// cost, at a steady state of evicting.
func BenchmarkStoreLookupAndAdmit(b *testing.B) {
	s := newStore(64 << 20)
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = fmt.Sprintf("http://example.com/%d", i)
	}
	r := &Request{}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := i & (len(keys) - 1)
		if o, _ := s.get([]byte(keys[k]), r); o == nil {
			s.put(obj(keys[k], 4<<10))
		}
	}
}

// BenchmarkStoreHit is a hit on one of 16k stored objects, from every
// core at once.
func BenchmarkStoreHit(b *testing.B) {
	s := newStore(1 << 30)
	keys := make([][]byte, 1<<14)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "http://example.com/%d", i)
		s.put(obj(string(keys[i]), 4<<10))
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := &Request{}
		i := 0
		for pb.Next() {
			if o, _ := s.get(keys[i&(len(keys)-1)], r); o == nil {
				b.Fatal("miss")
			}
			i++
		}
	})
}

// BenchmarkStoreLookupAndAdmitStoreOnly is BenchmarkStoreLookupAndAdmit
// without the Object's allocation, which the fetch makes whether or not
// the store keeps it: each key's object is made once and stored again
// after each eviction, the way a new fetch of it would be.
func BenchmarkStoreLookupAndAdmitStoreOnly(b *testing.B) {
	s := newStore(64 << 20)
	objs := make([]*Object, 1<<16)
	keys := make([][]byte, len(objs))
	for i := range objs {
		keys[i] = fmt.Appendf(nil, "http://example.com/%d", i)
		objs[i] = obj(string(keys[i]), 4<<10)
	}
	r := &Request{}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := i & (len(keys) - 1)
		if o, _ := s.get(keys[k], r); o == nil {
			s.put(objs[k])
		}
	}
}

// TestStoreKeysSharingAHash: two keys whose hashes are equal are both
// stored, each found under its own key, and either goes without the
// other.
func TestStoreKeysSharingAHash(t *testing.T) {
	s := newStore(1 << 20)
	a, b := obj("http://a.example/", 100), obj("http://b.example/", 100)
	a.hash.Store(42)
	b.hash.Store(42)
	s.put(a)
	s.put(b)
	sh := s.shardOf(42)
	found := func(o *Object) bool {
		vs := sh.find(42, o.Key)
		return vs != nil && len(vs.list) == 1 && vs.list[0] == o
	}
	if !found(a) || !found(b) {
		t.Fatalf("a found %v, b found %v; want both", found(a), found(b))
	}
	s.remove(b)
	if !found(a) || found(b) {
		t.Fatalf("after b went: a found %v, b found %v; want a alone", found(a), found(b))
	}
	s.put(b)
	s.remove(a)
	if found(a) || !found(b) {
		t.Fatalf("after a went: a found %v, b found %v; want b alone", found(a), found(b))
	}
	s.remove(b)
	if len(sh.byKey) != 0 {
		t.Fatalf("%d hashes left in the shard; want none", len(sh.byKey))
	}
	if objects, bytes := s.stats(); objects != 0 || bytes != 0 {
		t.Fatalf("the policy counts %d objects, %d bytes; want none", objects, bytes)
	}
}
