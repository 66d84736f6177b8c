package cache

// This file holds the disk store's index operations: lookups, insertion
// (a variant replaces the same variant, at most maxVariants per key),
// eviction and removal, over the layout of diskslab.go. Entries leave
// the index as copies: their slots are reused at once.

import "os"

// lookup returns the entries stored under key (copies), oldest first.
func (d *disk) lookup(key keyHash) []diskEntry {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []diskEntry
	for s := d.ix.first(key); s != 0; s = d.ix.at(s).sib {
		out = append(out, *d.ix.at(s))
	}
	return out
}

// touch records a hit on the variant sec of key: its CLOCK bit.
func (d *disk) touch(key keyHash, sec secHash) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for s := d.ix.first(key); s != 0; s = d.ix.at(s).sib {
		if d.ix.at(s).sec == sec {
			d.ix.setRef(s, true)
			return
		}
	}
}

func (d *disk) chainLen(key keyHash) int {
	n := 0
	for s := d.ix.first(key); s != 0; s = d.ix.at(s).sib {
		n++
	}
	return n
}

// dropLocked takes s out of the index and returns what it was.
func (d *disk) dropLocked(s slot) diskEntry {
	e := *d.ix.at(s)
	if !isSeg(e.id) || d.segDropLocked(&e) {
		d.bytes -= e.size()
		d.objects--
	}
	d.ix.remove(s)
	delete(d.newer, s)
	return e
}

// insertLocked puts e in the index; an entry of the same variant, and
// the oldest beyond maxVariants, are dropped and returned.
func (d *disk) insertLocked(e diskEntry) (slot, []diskEntry) {
	var dropped []diskEntry
	for s := d.ix.first(e.key); s != 0; {
		next := d.ix.at(s).sib
		if d.ix.at(s).sec == e.sec {
			dropped = append(dropped, d.dropLocked(s))
		}
		s = next
	}
	if d.chainLen(e.key) >= maxVariants {
		dropped = append(dropped, d.dropLocked(d.ix.first(e.key)))
	}
	if d.ix.full() {
		// Every slot is taken (134M entries): the next victim makes room.
		if v := d.ix.victim(); v != 0 {
			dropped = append(dropped, d.dropLocked(v))
		}
	}
	s := d.ix.add(e)
	if !isSeg(e.id) || d.segAddLocked(&e) {
		d.bytes += e.size()
		d.objects++
	}
	return s, dropped
}

// removeLocked takes the entry of e's key with e's id out of the index
// (e learns its head generation, for its files to be removed).
func (d *disk) removeLocked(e *diskEntry) bool {
	for s := d.ix.first(e.key); s != 0; s = d.ix.at(s).sib {
		if d.ix.at(s).id == e.id {
			e.setGen(d.dropLocked(s).gen())
			return true
		}
	}
	return false
}

// evictLocked picks the victims that bring the bytes under capacity,
// with the segments' dead space: past a quarter of it, the emptiest
// segment is reclaimed first.
func (d *disk) evictLocked() (victims []diskEntry) {
	for d.bytes+d.dead > d.capacity {
		if d.dead > d.capacity/4 && d.reclaimLocked() {
			continue
		}
		s := d.ix.victim()
		if s == 0 {
			break
		}
		victims = append(victims, d.dropLocked(s))
	}
	return victims
}

// forget journals the removal of entries and deletes their files.
func (d *disk) forget(es []diskEntry) {
	d.removeSegments()
	if len(es) == 0 {
		return
	}
	var rec []byte
	for i := range es {
		rec = appendRecord(rec, opDel, &es[i])
	}
	d.mu.Lock()
	err := d.appendLocked(rec)
	d.mu.Unlock()
	if err != nil {
		d.fault("journal", err)
	}
	for _, e := range es {
		if !isSeg(e.id) {
			d.open.drop(e.id)
			os.Remove(d.objectPath(e.id))
		}
		if e.gen() > 0 {
			os.Remove(d.headPath(e.id, e.gen()))
		}
	}
}

// remove drops the entry id of key (a file that did not check out, or a
// purge of one object).
func (d *disk) remove(key keyHash, id uint64) {
	d.mu.Lock()
	e := diskEntry{key: key, id: id}
	found := d.removeLocked(&e)
	d.mu.Unlock()
	if found {
		d.forget([]diskEntry{e})
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
// and returns them (for forget, once the lock is let go).
func (d *disk) dropWhereLocked(key keyHash, match func(*diskEntry) bool) []diskEntry {
	var es []diskEntry
	for s := d.ix.first(key); s != 0; {
		next := d.ix.at(s).sib
		if match(d.ix.at(s)) {
			es = append(es, d.dropLocked(s))
		}
		s = next
	}
	return es
}
