package cache

// This file holds the disk store's index in memory: the entries by key
// hash (a chain per key), their segmented LRU, insertion, eviction and
// removal.

import "os"

// lookup returns the entries stored under key (a copy).
func (d *disk) lookup(key keyHash) []diskEntry {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []diskEntry
	for e := d.index[key]; e != nil; e = e.sib {
		out = append(out, *e)
	}
	return out
}

// touch records a hit on the variant sec of key: the segmented LRU's
// promotion.
func (d *disk) touch(key keyHash, sec uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for e := d.index[key]; e != nil; e = e.sib {
		if e.sec == sec {
			d.lru.touch(e, d.capacity*8/10)
			return
		}
	}
}

// The variants of a key are a chain from the map, oldest first: no
// slice per key, so a million keys load without a million allocations.

func (d *disk) chainAdd(e *diskEntry) {
	e.sib = nil
	x := d.index[e.key]
	if x == nil {
		d.index[e.key] = e
		return
	}
	for x.sib != nil {
		x = x.sib
	}
	x.sib = e
}

func (d *disk) chainRemove(e *diskEntry) {
	x := d.index[e.key]
	switch {
	case x == e && e.sib == nil:
		delete(d.index, e.key)
	case x == e:
		d.index[e.key] = e.sib
	default:
		for ; x != nil; x = x.sib {
			if x.sib == e {
				x.sib = e.sib
				break
			}
		}
	}
	e.sib = nil
}

func (d *disk) chainLen(key keyHash) int {
	n := 0
	for x := d.index[key]; x != nil; x = x.sib {
		n++
	}
	return n
}

// linkLocked adds e to the index and the LRU.
func (d *disk) linkLocked(e *diskEntry) {
	d.chainAdd(e)
	d.lru.add(e)
	d.bytes += e.size
	d.objects++
}

// dropLocked takes x out of the index and the LRU.
func (d *disk) dropLocked(x *diskEntry) {
	d.unlinkLocked(x)
	d.chainRemove(x)
}

// insertLocked puts e in the index; an entry of the same variant, and
// the oldest beyond maxVariants, are dropped and returned.
func (d *disk) insertLocked(e *diskEntry) (dropped []*diskEntry) {
	for x := d.index[e.key]; x != nil; {
		next := x.sib
		if x.sec == e.sec {
			dropped = append(dropped, x)
			d.dropLocked(x)
		}
		x = next
	}
	if d.chainLen(e.key) >= maxVariants {
		oldest := d.index[e.key]
		dropped = append(dropped, oldest)
		d.dropLocked(oldest)
	}
	d.linkLocked(e)
	return dropped
}

func (d *disk) unlinkLocked(e *diskEntry) {
	d.lru.remove(e)
	d.bytes -= e.size
	d.objects--
}

// removeLocked takes the entry of e's key with e's id out of the index
// (e learns its head generation, for its files to be removed).
func (d *disk) removeLocked(e *diskEntry) bool {
	for x := d.index[e.key]; x != nil; x = x.sib {
		if x.id == e.id {
			e.gen = x.gen
			d.dropLocked(x)
			return true
		}
	}
	return false
}

// evictLocked picks the victims that bring the bytes under capacity.
func (d *disk) evictLocked() (victims []*diskEntry) {
	for d.bytes > d.capacity {
		v := d.lru.victim()
		if v == nil {
			break
		}
		d.removeLocked(v)
		victims = append(victims, v)
	}
	return victims
}

// forget journals the removal of entries and deletes their files.
func (d *disk) forget(es []*diskEntry) {
	if len(es) == 0 {
		return
	}
	var rec []byte
	for _, e := range es {
		rec = appendRecord(rec, opDel, e)
	}
	d.mu.Lock()
	err := d.appendLocked(rec)
	d.mu.Unlock()
	if err != nil {
		d.fault("journal", err)
	}
	for _, e := range es {
		d.open.drop(e.id)
		os.Remove(d.objectPath(e.id))
		if e.gen > 0 {
			os.Remove(d.headPath(e.id, e.gen))
		}
	}
}

// remove drops the entry id of key (a file that did not check out, or a
// purge of one object).
func (d *disk) remove(key keyHash, id uint64) {
	d.mu.Lock()
	e := &diskEntry{key: key, id: id}
	found := d.removeLocked(e)
	d.mu.Unlock()
	if found {
		d.forget([]*diskEntry{e})
	}
}

// purge drops every entry of key and reports how many there were. While
// the index loads, older records of key are dropped as they are read.
func (d *disk) purge(key keyHash) int {
	d.mu.Lock()
	es := d.dropWhereLocked(key, func(*diskEntry) bool { return true })
	if d.loading.Load() {
		d.tomb[key] = struct{}{}
	}
	d.mu.Unlock()
	d.forget(es)
	return len(es)
}

// dropWhereLocked takes the entries of key that match out of the index
// and the LRU and returns them (for forget, once the lock is let go).
func (d *disk) dropWhereLocked(key keyHash, match func(*diskEntry) bool) []*diskEntry {
	var es []*diskEntry
	for x := d.index[key]; x != nil; x = x.sib {
		if match(x) {
			es = append(es, x)
		}
	}
	for _, e := range es {
		d.dropLocked(e)
	}
	return es
}
