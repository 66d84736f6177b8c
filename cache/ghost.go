package cache

// This file holds the memory policy's ghost (policy.go): the hashes of
// the keys the small FIFO let go unasked, the newest of them up to a
// bound, in a table of one cache line a lookup.

import (
	"cmp"
	"slices"
)

//
// It was a Go map from hash to count beside a queue of the hashes in
// order: each eviction from the small FIFO inserted in the map and
// trimmed the queue's oldest out of it, and each admission looked in it,
// three map operations a miss on a map as large as the main region.
// Now an entry carries the number of the add that made it, so it is
// known to have fallen out of the newest bound by arithmetic alone and
// is never deleted: an add writes one slot, a take reads one group.

// ghostSlot is one remembered hash (with its low bit set, so that an
// empty slot is all zero) and the add that wrote it.
type ghostSlot struct {
	h   uint64
	seq uint32
}

// ghostWays is a group's slots: 4 of 16 bytes, a cache line.
const ghostWays = 4

// ghost remembers the newest bound hashes added (bound is given with
// each call: the main region's objects). Its table keeps at least
// ghostRoom slots per remembered hash, so that a group rarely holds more
// than its ways of live ones; when it does, the oldest is overwritten.
type ghost struct {
	slots []ghostSlot // groups of ghostWays; len a power of two
	seq   uint32      // adds so far, mod 2^32
}

const ghostRoom = 4

// add remembers h.
func (g *ghost) add(h uint64, bound int) {
	if len(g.slots) < ghostRoom*bound || len(g.slots) > 8*ghostRoom*bound {
		g.resize(bound)
	}
	g.seq++
	g.put(ghostSlot{h | 1, g.seq}, bound)
}

// put writes s in its group: in an empty or forgotten slot, else over
// the oldest.
func (g *ghost) put(s ghostSlot, bound int) {
	grp := g.group(s.h)
	at, oldest := 0, uint32(0)
	for i, e := range grp {
		age := g.seq - e.seq
		if e.h == 0 || age >= uint32(bound) {
			at = i
			break
		}
		if age >= oldest {
			at, oldest = i, age
		}
	}
	grp[at] = s
}

// take reports whether h is remembered, and forgets it.
func (g *ghost) take(h uint64, bound int) bool {
	if len(g.slots) == 0 {
		return false
	}
	h |= 1
	grp := g.group(h)
	for i, e := range grp {
		if e.h == h && g.seq-e.seq < uint32(bound) {
			grp[i] = ghostSlot{}
			return true
		}
	}
	return false
}

func (g *ghost) group(h uint64) []ghostSlot {
	n := uint64(len(g.slots) / ghostWays)
	i := ((h >> 1) & (n - 1)) * ghostWays
	return g.slots[i : i+ghostWays]
}

// resize makes the table 2*ghostRoom slots per remembered hash, and puts
// the ones still remembered back, oldest first (so that a full group
// keeps the newest).
func (g *ghost) resize(bound int) {
	n := ghostWays
	for n < 2*ghostRoom*bound {
		n *= 2
	}
	old := g.slots
	g.slots = make([]ghostSlot, n)
	var live []ghostSlot
	for _, e := range old {
		if e.h != 0 && g.seq-e.seq < uint32(bound) {
			live = append(live, e)
		}
	}
	slices.SortFunc(live, func(a, b ghostSlot) int { return cmp.Compare(g.seq-b.seq, g.seq-a.seq) })
	for _, e := range live {
		g.put(e, bound)
	}
}
