package cache

// This file holds the sweep: once the index is loaded, the object and
// head files of earlier processes that the journal does not name are
// removed (a write that died with its process, a delete that did not
// finish), a directory at a time, while the proxy serves.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sirupsen/logrus"
)

// sweep removes the files of earlier processes that the journal does not
// name. Earlier processes' files are told from this one's by id, on
// either side of this process's range (a clock set back leaves ids above
// it). load made d.fresh before the first refresh could run.
func (d *disk) sweep(before uint64) {
	defer close(d.swept)
	d.sweepFiles(before, d.sweepIDs())
	d.mu.Lock()
	d.fresh = nil
	d.mu.Unlock()
}

// named is what the index named when the sweep began: the ids, sorted (8
// bytes an object for the sweep's time), and the head generations of the
// few a 304 refreshed.
type named struct {
	ids  []uint64
	gens map[uint64]uint32
}

// genOf is id's head generation, and whether id is named at all.
func (n *named) genOf(id uint64) (uint32, bool) {
	if _, ok := slices.BinarySearch(n.ids, id); !ok {
		return 0, false
	}
	return n.gens[id], true
}

// sweepIDs reads what the index names, a chunk of the slab at a time, so
// that lookups wait for one chunk at most, not for the whole index (a
// tenth of a second at 10M objects): an entry of an earlier process does
// not move while it stays, and what takes a freed slot meanwhile is this
// process's.
func (d *disk) sweepIDs() *named {
	n := &named{gens: map[uint64]uint32{}}
	for i, more := 0, true; more; {
		d.mu.Lock()
		if n.ids == nil {
			n.ids = make([]uint64, 0, max(d.objects, 0))
		}
		i = d.ix.eachIn(i, chunkLen, func(_ slot, e *diskEntry) {
			n.ids = append(n.ids, e.id)
			if e.gen() > 0 {
				n.gens[e.id] = e.gen()
			}
		})
		more = i < d.ix.used
		d.mu.Unlock()
	}
	slices.Sort(n.ids)
	return n
}

// sweepFiles removes the files of earlier processes (ids up to before,
// or above what this process issued) that known does not name. A head
// file of an object a 304 refreshed since the sweep began is kept: its
// generation is newer than known's, and removing it would leave the
// object naming a head that is gone.
func (d *disk) sweepFiles(before uint64, known *named) {
	removed := 0
	for i := range 256 {
		select {
		case <-d.stop:
			return
		default:
		}
		dir := filepath.Join(d.dir, "objects", fmt.Sprintf("%02x", i))
		if st, err := os.Lstat(dir); err != nil || !st.IsDir() {
			continue // never listed through a link
		}
		names, _ := readNames(dir)
		// This process's files have ids in (before, issued]: read after
		// the listing, issued covers every one of them listed.
		issued := d.nextID.Load()
		for _, n := range names {
			idPart, genPart, isHead := strings.Cut(n, ".")
			id, err := strconv.ParseUint(idPart, 16, 64)
			if err != nil || id > before && id <= issued {
				continue
			}
			gen, ok := known.genOf(id)
			if isHead {
				// A head file: kept only while its object names its generation.
				g, err := strconv.ParseUint(genPart, 16, 32)
				ok = ok && err == nil && (uint32(g) == gen || d.refreshedSince(id))
			}
			if !ok {
				os.Remove(filepath.Join(dir, n))
				removed++
			}
		}
	}
	if removed > 0 {
		d.log.WithFields(logrus.Fields{"disk": d.dir, "files": removed}).Info("cache disk: removed object files the journal does not name")
	}
}

// refreshedSince reports whether a 304 refreshed (or is refreshing) the
// head of object id since the sweep began.
func (d *disk) refreshedSince(id uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.fresh[id]
	return ok
}
