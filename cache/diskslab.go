package cache

// This file holds the disk index's memory layout, built to name a hundred
// million objects in little RAM that the GC never scans:
//   - the entries (32 bytes each, no pointers: 8 bytes of the key's hash,
//     4 of the variant's, the id, the size and head generation packed
//     in one word, the next variant) live in chunks of a slab
//     that never move, numbered by slot (1 + their index; 0 is none);
//     a freed slot is reused, through a free list;
//   - a key's variants are a chain through the slab, oldest first;
//   - an open-addressing table (linear probing, at most 80 % full) finds
//     a key's first variant by the key's hash: each position is 32 bits,
//     the slot (27 bits: 134M entries) and 5 bits of the key's hash, so
//     that a probe past other keys seldom reads their entries;
//   - eviction is CLOCK: one reference bit per entry, which a hit sets;
//     the hand gives a set bit a second chance (it clears it) and evicts
//     the first entry whose bit is clear.
//
// Everything here is under disk.mu.

import (
	"encoding/binary"
	"runtime"
	"sync"
	"unsafe"
)

const (
	chunkBits = 14
	chunkLen  = 1 << chunkBits
)

// slot numbers an entry of the slab: 1 + its index; 0 is none.
type slot uint32

// diskIndex is the index's entries, their table by key and the CLOCK.
type diskIndex struct {
	chunks [][]diskEntry // each chunkLen long
	refs   [][]uint64    // the reference bits, a word per 64 entries
	used   int           // entries handed out from the slab (its high water)
	free   slot          // freed entries, chained through sib
	table  []slot        // the first variant of each key, by key hash
	keys   int           // keys in table
	hand   int           // CLOCK: the next slab index to look at
	// prefetched is where prefetch leaves the sum of what it read.
	prefetched slot
	// spare hands over chunks made, and their pages touched, ahead of
	// need by the loader (makeChunks, diskload.go); nil but while
	// loading.
	spare chan []diskEntry
}

func (x *diskIndex) at(s slot) *diskEntry {
	i := int(s - 1)
	return &x.chunks[i>>chunkBits][i&(chunkLen-1)]
}

// A table position holds a slot and a fingerprint of its key's hash.
const (
	slotBits = 27
	slotMask = 1<<slotBits - 1
	maxSlots = slotMask // entries the slab may hold
)

func keyHash64(key keyHash) uint64 { return binary.LittleEndian.Uint64(key[:8]) }

func keyPos(key keyHash, mask int) int { return int(keyHash64(key)) & mask }

// fingerprint is the table value of s for key: 5 bits of its hash above
// the slot.
func fingerprint(key keyHash) slot { return slot(keyHash64(key)>>59) << slotBits }

// find is where key is in the table, or where it would go, and its first
// variant (0: none).
func (x *diskIndex) find(key keyHash) (int, slot) {
	if len(x.table) == 0 {
		return -1, 0
	}
	mask := len(x.table) - 1
	fp := fingerprint(key)
	for i := keyPos(key, mask); ; i = (i + 1) & mask {
		v := x.table[i]
		if v == 0 {
			return i, 0
		}
		if v&^slotMask == fp {
			if s := v & slotMask; x.at(s).key == key {
				return i, s
			}
		}
	}
}

// prefetch reads the table places of recs' keys, which the CPU may
// have all in flight at once (they depend on nothing), so that the finds
// that follow hit its cache.
func (x *diskIndex) prefetch(recs []loadRec) {
	if len(x.table) == 0 {
		return
	}
	mask := len(x.table) - 1
	var sum slot
	for i := range recs {
		sum += x.table[keyPos(recs[i].e.key, mask)]
	}
	x.prefetched += sum // kept, or the reads would be dropped
}

// full reports whether the slab has no slot left for a new entry.
func (x *diskIndex) full() bool { return x.free == 0 && x.used >= maxSlots }

// grow makes room in the table for one more key.
func (x *diskIndex) grow() {
	if (x.keys+1)*5 > len(x.table)*4 {
		x.rehash(max(1024, 2*len(x.table)))
	}
}

// place puts s, a new key's first entry, at table position pos (from
// find, after grow).
func (x *diskIndex) place(pos int, s slot) {
	x.table[pos] = s | fingerprint(x.at(s).key)
	x.keys++
}

// first is key's first variant (0: none).
func (x *diskIndex) first(key keyHash) slot {
	_, s := x.find(key)
	return s
}

// reserve sizes the table for n keys at once (the loader knows how many
// records the journal has: growing step by step cost a third of a load).
// A journal of dead records as well (up to twice the live ones before a
// compaction) leaves it at most half full: 8 bytes a key more, where
// shrinking it after the load would hold lookups for a rehash.
func (x *diskIndex) reserve(n int) {
	size := max(len(x.table), 1024)
	for size*4 < n*5 {
		size *= 2
	}
	if size != len(x.table) {
		x.rehash(size)
	}
}

func (x *diskIndex) rehash(size int) {
	old := x.table
	x.table = make([]slot, size)
	// Its pages are written once now, in order: read first at random
	// (the load's prefetch), each would fault twice, for the zero page
	// and then for a copy of it. A large table's are written by a
	// goroutine per core at once, as a fault waits on nothing another
	// core's does (a 10M-key table's 16k faults took 0.28 s on one core
	// of a VM, 17 µs each).
	touchPages(x.table)
	mask := size - 1
	for _, v := range old {
		if v == 0 {
			continue
		}
		i := keyPos(x.at(v&slotMask).key, mask)
		for x.table[i] != 0 {
			i = (i + 1) & mask
		}
		x.table[i] = v
	}
}

// touchPages writes each 4 KiB page of t once, in parallel when t is
// large (a table grown while serving is small: no goroutine for it).
func touchPages(t []slot) {
	const page = 1024 // slots in a page
	if len(t) < 1<<20 {
		for i := 0; i < len(t); i += page {
			t[i] = 0
		}
		return
	}
	var wg sync.WaitGroup
	step := (len(t)/runtime.GOMAXPROCS(0) + page - 1) / page * page
	for from := 0; from < len(t); from += step {
		wg.Go(func() {
			for i := from; i < min(from+step, len(t)); i += page {
				t[i] = 0
			}
		})
	}
	wg.Wait()
}

// add puts e at the end of its key's chain and returns its slot.
func (x *diskIndex) add(e diskEntry) slot {
	x.grow()
	s := x.alloc(e)
	pos, head := x.find(e.key)
	if head == 0 {
		x.place(pos, s)
		return s
	}
	t := head
	for x.at(t).sib != 0 {
		t = x.at(t).sib
	}
	x.at(t).sib = s
	return s
}

// remove takes s out of its chain (and the key out of the table when it
// was its only variant) and frees it.
func (x *diskIndex) remove(s slot) {
	e := x.at(s)
	pos, head := x.find(e.key)
	switch {
	case head == s && e.sib != 0:
		x.table[pos] = e.sib | fingerprint(e.key)
	case head == s:
		x.deleteAt(pos)
		x.keys--
	default:
		for t := head; t != 0; t = x.at(t).sib {
			if x.at(t).sib == s {
				x.at(t).sib = e.sib
				break
			}
		}
	}
	x.release(s)
}

// deleteAt empties table position i, moving back the entries after it
// that would no longer be found (linear probing's deletion, no
// tombstones).
func (x *diskIndex) deleteAt(i int) {
	mask := len(x.table) - 1
	for {
		x.table[i] = 0
		j := i
		for {
			j = (j + 1) & mask
			if x.table[j] == 0 {
				return
			}
			k := keyPos(x.at(x.table[j]&slotMask).key, mask)
			// The entry at j stays unless its home k is outside (i, j]
			// cyclically: then i is on its probe path, and it moves there.
			if i < j && (k <= i || k > j) || i > j && k <= i && k > j {
				x.table[i] = x.table[j]
				i = j
				break
			}
		}
	}
}

func (x *diskIndex) alloc(e diskEntry) slot {
	s := x.free
	if s != 0 {
		x.free = x.at(s).sib
	} else {
		i := x.used
		x.used++
		if i>>chunkBits == len(x.chunks) {
			x.chunks = append(x.chunks, x.newChunk())
			x.refs = append(x.refs, make([]uint64, chunkLen/64))
		}
		s = slot(i + 1)
	}
	e.sib = 0
	*x.at(s) = e
	x.setRef(s, false)
	return s
}

// newChunk is a chunk for the slab: a spare one if the loader made it
// ready, else a new one.
func (x *diskIndex) newChunk() []diskEntry {
	select {
	case c := <-x.spare:
		return c
	default:
		return make([]diskEntry, chunkLen)
	}
}

// touchedChunk is a new chunk whose pages have been written once: the
// page faults (a third of a 10M load in a VM, 4 µs each) are taken on the
// core that makes it, not on the one that fills it.
func touchedChunk() []diskEntry {
	c := make([]diskEntry, chunkLen)
	for i := 0; i < len(c); i += pageEntries {
		c[i].sib = 0
	}
	return c
}

// pageEntries is the entries in a 4 KiB page, or fewer.
const pageEntries = 4096 / int(unsafe.Sizeof(diskEntry{}))

func (x *diskIndex) release(s slot) {
	*x.at(s) = diskEntry{sib: x.free} // id 0: free
	x.free = s
	x.setRef(s, false)
}

func (x *diskIndex) setRef(s slot, on bool) {
	i := int(s - 1)
	w, bit := &x.refs[i>>chunkBits][(i&(chunkLen-1))>>6], uint64(1)<<(i&63)
	if on {
		*w |= bit
	} else {
		*w &^= bit
	}
}

func (x *diskIndex) ref(s slot) bool {
	i := int(s - 1)
	return x.refs[i>>chunkBits][(i&(chunkLen-1))>>6]&(uint64(1)<<(i&63)) != 0
}

// victim is the entry CLOCK evicts next (0 when there is none).
func (x *diskIndex) victim() slot {
	for n := 0; n <= 2*x.used; n++ {
		if x.hand >= x.used {
			x.hand = 0
		}
		s := slot(x.hand + 1)
		x.hand++
		switch {
		case x.at(s).id == 0: // free
		case x.ref(s):
			x.setRef(s, false)
		default:
			return s
		}
	}
	return 0
}

// each calls f for every entry, in slab order.
func (x *diskIndex) each(f func(s slot, e *diskEntry)) {
	x.eachIn(0, x.used, f)
}

// eachIn calls f for every entry of the n slab places from index i, in
// slab order, and returns the index after them.
func (x *diskIndex) eachIn(i, n int, f func(s slot, e *diskEntry)) int {
	end := min(i+n, x.used)
	for ; i < end; i++ {
		s := slot(i + 1)
		if e := x.at(s); e.id != 0 {
			f(s, e)
		}
	}
	return end
}
