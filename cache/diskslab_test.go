package cache

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// TestDiskIndexAgreesWithAMap: adds and removes at random, with keys made
// to collide in the table (the same low bits), leave the index finding
// exactly what a map holds, chains intact, and freed slots reused.
func TestDiskIndexAgreesWithAMap(t *testing.T) {
	var x diskIndex
	want := map[keyHash][]uint64{} // key -> ids, oldest first
	r := rand.New(rand.NewPCG(1, 2))
	key := func(i int) keyHash {
		k := hashKey(fmt.Appendf(nil, "k%d", i))
		if i%3 == 0 {
			k[0], k[1] = 7, 7 // the same place in any table up to 64Ki
		}
		return k
	}
	id := uint64(0)
	for step := 0; step < 200000; step++ {
		k := key(r.IntN(5000))
		if r.IntN(3) > 0 || len(want[k]) == 0 {
			id++
			x.add(diskEntry{key: k, id: id, sec: secHash(id)})
			want[k] = append(want[k], id)
			continue
		}
		// Remove one of the key's variants.
		ids := want[k]
		j := r.IntN(len(ids))
		s := x.first(k)
		for n := 0; n < j; n++ {
			s = x.at(s).sib
		}
		if x.at(s).id != ids[j] {
			t.Fatalf("step %d: variant %d of a key is id %d; want %d", step, j, x.at(s).id, ids[j])
		}
		x.remove(s)
		want[k] = append(ids[:j:j], ids[j+1:]...)
		if len(want[k]) == 0 {
			delete(want, k)
		}
	}
	if x.keys != len(want) {
		t.Fatalf("%d keys in the table; want %d", x.keys, len(want))
	}
	for i := 0; i < 5000; i++ {
		k := key(i)
		var got []uint64
		for s := x.first(k); s != 0; s = x.at(s).sib {
			got = append(got, x.at(s).id)
		}
		if fmt.Sprint(got) != fmt.Sprint(want[k]) {
			t.Fatalf("key %d: %v; want %v", i, got, want[k])
		}
	}
	live := 0
	x.each(func(slot, *diskEntry) { live++ })
	total := 0
	for _, ids := range want {
		total += len(ids)
	}
	if live != total || x.used > total+len(want)+5000 {
		t.Fatalf("%d live entries (want %d), %d slots ever used: freed slots are not reused", live, total, x.used)
	}
}

// TestDiskIndexClockGivesASecondChance: the hand passes over entries hit
// since it last came by, and takes the first that was not.
func TestDiskIndexClockGivesASecondChance(t *testing.T) {
	var x diskIndex
	var ss []slot
	for i := 0; i < 10; i++ {
		ss = append(ss, x.add(diskEntry{key: hashKey(fmt.Appendf(nil, "%d", i)), id: uint64(i + 1)}))
	}
	x.setRef(ss[0], true)
	x.setRef(ss[1], true)
	if v := x.victim(); v != ss[2] {
		t.Fatalf("victim %d; want the first entry not hit (%d)", v, ss[2])
	}
	x.remove(ss[2])
	for i := 3; i < 10; i++ {
		x.remove(x.victim())
	}
	if v := x.victim(); v != ss[0] {
		t.Fatalf("after a round: victim %d; want the first hit one, its chance spent (%d)", v, ss[0])
	}
	x.remove(ss[0])
	x.remove(ss[1])
	if v := x.victim(); v != 0 {
		t.Fatalf("an empty index has victim %d", v)
	}
}

// TestDiskIndexMemoryPerObject: a million objects cost at most 64 bytes of
// heap each, pointers none (the GC does not scan them).
func TestDiskIndexMemoryPerObject(t *testing.T) {
	if testing.Short() {
		t.Skip("a million entries")
	}
	const n = 1_000_000
	keys := make([]keyHash, n)
	for i := range keys {
		keys[i] = hashKey(fmt.Appendf(nil, "http://example.com/%d", i))
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	x := &diskIndex{}
	for i, k := range keys {
		e := diskEntry{key: k, id: uint64(i + 1)}
		e.setSize(10 << 10)
		x.add(e)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	if per > 64 {
		t.Fatalf("%.1f bytes of heap per object; want at most 64", per)
	}
	if x.keys != n {
		t.Fatal("lost keys")
	}
	runtime.KeepAlive(x)
}
