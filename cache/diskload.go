package cache

// This file holds the loading of the disk store's index from its journal
// at start-up (in the background: the proxy serves meanwhile, and keys not
// loaded yet are misses) and the journal's compaction. The journal is read
// sequentially, 48 bytes per record; no object file is opened.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/peerd/peerd/internal/atomicfile"
)

// load opens the journal and reads the index from it. A failure is
// logged and counted before ready closes, so that whoever waits on ready
// sees it.
func (d *disk) load() {
	start := d.idsFrom // this process's ids are above it (read here, an object stored before the load began was taken for an earlier process's and swept)
	t0 := time.Now()
	err := d.openJournal(true)
	d.mu.Lock()
	d.loading.Store(false)
	d.tomb, d.newer = map[keyHash]struct{}{}, map[slot]struct{}{}
	d.fresh = map[uint64]struct{}{}     // (before any refresh can run)
	d.noJournal.Store(d.journal == nil) // never opened: the store is off
	d.whole = err == nil && d.journal != nil
	victims := d.evictLocked()
	d.mu.Unlock()
	if err != nil {
		msg := "cache disk: cannot load the whole index; what was read is kept, and new objects are stored"
		if d.noJournal.Load() {
			msg = "cache disk: cannot open the journal; nothing is stored on disk until a restart (memory caching goes on)"
		}
		d.log.WithError(err).WithField("disk", d.dir).Error(msg)
		d.errors.Add(1)
	}
	d.journalOpened()
	d.forget(victims)
	if err == nil && !d.noJournal.Load() {
		from := "journal"
		if d.fromImage {
			from = "image"
		}
		d.log.WithFields(logrus.Fields{"disk": d.dir, "objects": d.loaded.Load(), "from": from, "took": time.Since(t0).Round(time.Millisecond).String()}).Info("cache disk: index loaded")
	}
	d.segsLoaded()
	d.maybeCompact()
	close(d.ready)
	d.sweep(start)
}

// openJournal opens the journal and reads the index from it; first, a
// file that is not a peerd journal is moved aside and a new one started.
func (d *disk) openJournal(first bool) error {
	path := filepath.Join(d.dir, "journal")
	f, err := openNoFollow(path, os.O_RDWR|os.O_CREATE)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", path)
	}
	if err != nil {
		f.Close()
		return err
	}
	size := st.Size()
	hdr := make([]byte, len(journalHdr))
	switch {
	case size < int64(len(journalHdr)):
		// New (or cut before its header was whole): start it.
		err := f.Truncate(0)
		if err == nil {
			_, err = f.WriteAt([]byte(journalHdr), 0)
		}
		if err != nil {
			f.Close()
			return err
		}
		size = int64(len(journalHdr))
	default:
		if _, err := f.ReadAt(hdr, 0); err != nil || string(hdr) != journalHdr {
			// Not ours (or its first bytes are gone): keep it aside, as
			// the operator may want it, and start a journal of our own.
			// The object files it named are swept as unnamed ones.
			f.Close()
			if !first {
				return fmt.Errorf("%s is not a peerd journal", path)
			}
			aside := path + ".unreadable-" + strconv.FormatInt(time.Now().Unix(), 10)
			if err := os.Rename(path, aside); err != nil {
				return fmt.Errorf("%s is not a peerd journal, and cannot be moved aside: %w", path, err)
			}
			d.log.WithField("disk", d.dir).WithField("moved_to", aside).Error("cache disk: the journal is not a peerd journal; it was moved aside and the store starts empty")
			return d.openJournal(false)
		}
	}
	// A record cut short (a power loss in its write) is dropped, so that
	// new records start on a record boundary.
	whole := int64(len(journalHdr)) + (size-int64(len(journalHdr)))/recordSize*recordSize
	if whole != size {
		if err := f.Truncate(whole); err != nil {
			f.Close()
			return err
		}
	}
	f.Close()
	img, ih, ihlen := d.takeImage(path, whole)
	if img != nil {
		defer img.Close()
	}
	app, err := openNoFollow(path, os.O_WRONLY|os.O_APPEND)
	if err != nil {
		return err
	}
	rd, err := openNoFollow(path, os.O_RDONLY)
	if err != nil {
		app.Close()
		return err
	}
	defer rd.Close()
	d.mu.Lock()
	if d.closing {
		d.mu.Unlock()
		app.Close()
		return nil
	}
	d.journal, d.jsize = app, whole
	d.mu.Unlock()
	d.journalOpened()
	if img != nil {
		err := d.loadImage(img, ih, ihlen, whole-int64(len(journalHdr)))
		if err == nil || errors.Is(err, errImageClosing) {
			d.fromImage = err == nil
			return nil
		}
		d.log.WithError(err).WithField("disk", d.dir).Warn("cache disk: the index image does not check out; the journal is read instead")
		d.errors.Add(1)
	}
	return d.readJournal(rd, whole)
}

// readJournal applies the records up to end, a batch at a time so that
// lookups are not held up. Two goroutines work ahead on another core:
// one reads and parses the next batch while this one is applied (a
// quarter of the load's CPU), the other makes the slab's new chunks and
// takes their page faults (a third of it, in a VM). Within a batch,
// records go a window at a time: the table places of a window's keys
// are read first, loads that do not wait on each other, and then
// applied; one at a time, each waited for its own miss (a 10M-key table
// is 64 MiB; this halved the load).
func (d *disk) readJournal(rd *os.File, end int64) error {
	off := int64(len(journalHdr))
	// The table is sized once for the journal's records. The index is
	// read under the lock: requests that miss are storing objects in it
	// already.
	records := int((end - off) / recordSize)
	spare := make(chan []diskEntry, 4)
	d.mu.Lock()
	d.ix.reserve(d.ix.keys + records)
	d.ix.spare = spare
	chunks := (d.ix.used+records+chunkLen-1)/chunkLen - len(d.ix.chunks)
	d.mu.Unlock()
	batches, free := make(chan loadBatch, 1), make(chan []loadRec, 2)
	free <- make([]loadRec, 0, loadBatchSize)
	free <- make([]loadRec, 0, loadBatchSize)
	done := make(chan struct{})
	defer func() {
		close(done)
		d.mu.Lock()
		d.ix.spare = nil
		d.mu.Unlock()
	}()
	go readBatches(rd, off, end, batches, free, done)
	go makeChunks(chunks, spare, done)
	for b := range batches {
		if b.err != nil {
			return b.err
		}
		if b.bad > 0 {
			d.errors.Add(b.bad)
			d.log.WithField("disk", d.dir).WithField("records", b.bad).Warn("cache disk: journal records that do not check out were skipped")
		}
		if b.recs == nil {
			break
		}
		if !d.applyBatch(b.recs) {
			return nil
		}
		free <- b.recs[:0]
	}
	return nil
}

// loadBatchSize is the records a batch reads and applies (3 MiB of
// journal; a lookup waits for one batch at most, about 10 ms).
const loadBatchSize = 1 << 16

// loadBatch is what the reader hands over: records parsed, or the end
// (recs nil) with the count of records that did not check out, or an
// error.
type loadBatch struct {
	recs []loadRec
	bad  int64
	err  error
}

// readBatches reads the journal from off to end, a batch at a time, into
// the record slices free hands back, until done closes.
func readBatches(rd *os.File, off, end int64, out chan<- loadBatch, free <-chan []loadRec, done <-chan struct{}) {
	defer close(out)
	buf := make([]byte, loadBatchSize*recordSize)
	var bad int64
	send := func(b loadBatch) bool {
		select {
		case out <- b:
			return true
		case <-done:
			return false
		}
	}
	for off < end {
		n := min(int64(len(buf)), end-off)
		if _, err := io.ReadFull(io.NewSectionReader(rd, off, n), buf[:n]); err != nil {
			send(loadBatch{err: err})
			return
		}
		off += n
		var recs []loadRec
		select {
		case recs = <-free:
		case <-done:
			return
		}
		for p := buf[:n]; len(p) >= recordSize; p = p[recordSize:] {
			op, e, ok := parseRecord(p)
			if !ok {
				bad++ // a record torn by a power loss: the others stand alone
				continue
			}
			recs = append(recs, loadRec{op, e})
		}
		if !send(loadBatch{recs: recs}) {
			return
		}
	}
	send(loadBatch{bad: bad})
}

// makeChunks makes n slab chunks with their pages touched, for the
// index to take as it grows, until done closes.
func makeChunks(n int, out chan<- []diskEntry, done <-chan struct{}) {
	for range n {
		select {
		case out <- touchedChunk():
		case <-done:
			return
		}
	}
}

// applyBatch applies one batch of records under the lock, then forgets
// the entries they displaced; false when the store is closing.
func (d *disk) applyBatch(recs []loadRec) bool {
	var victims []diskEntry
	d.mu.Lock()
	if d.closing {
		d.mu.Unlock()
		return false
	}
	d.records += int64(len(recs))
	for w := 0; w < len(recs); w += loadWindow {
		win := recs[w:min(w+loadWindow, len(recs))]
		d.ix.prefetch(win)
		for i := range win {
			r := &win[i]
			if isSeg(r.e.id) {
				// Numbered above every segment a record names; a
				// record of a segment that is gone is no object.
				d.segNext = max(d.segNext, segNo(r.e.id)+1)
				if d.segs[segNo(r.e.id)] == nil {
					continue
				}
			}
			switch r.op {
			case opDel:
				d.removeLocked(&r.e)
			case opHead:
				d.headLocked(&r.e)
			default:
				victims = append(victims, d.loadLocked(r.e)...)
			}
		}
	}
	d.loaded.Store(int64(d.objects))
	d.mu.Unlock()
	d.forget(victims)
	return true
}

// loadRec is a journal record read.
type loadRec struct {
	op byte
	e  diskEntry
}

// loadWindow is how many records' table places are read ahead.
const loadWindow = 64

// loadLocked applies one add record read from the journal as a commit
// does (insertLocked), except that it does not replace what was stored
// since the start, nor bring back what was purged meanwhile. Between
// records, the journal's order decides: the later one stands, as it did
// while that process ran.
func (d *disk) loadLocked(e diskEntry) (victims []diskEntry) {
	if len(d.tomb) == 0 && len(d.newer) == 0 && !d.ix.full() {
		// Nothing stored or purged since the start: a key not seen yet
		// (most of them, in a compacted journal) costs one probe.
		d.ix.grow()
		if pos, head := d.ix.find(e.key); head == 0 {
			d.ix.place(pos, d.ix.alloc(e))
			if !isSeg(e.id) || d.segAddLocked(&e) {
				d.bytes += e.size()
				d.objects++
			}
			return nil
		}
	}
	if len(d.tomb) > 0 {
		if _, ok := d.tomb[e.key]; ok {
			return []diskEntry{e}
		}
	}
	if len(d.newer) > 0 {
		for s := d.ix.first(e.key); s != 0; s = d.ix.at(s).sib {
			if _, ok := d.newer[s]; d.ix.at(s).sec == e.sec && ok {
				return []diskEntry{e}
			}
		}
	}
	_, dropped := d.insertLocked(e)
	return dropped
}

// compactAt is how many records beyond the live objects make the journal
// be rewritten.
const compactAt = 64 << 10

// maybeCompact rewrites the journal when most of it is dead records.
func (d *disk) maybeCompact() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.journal == nil || d.loading.Load() || d.records < 2*int64(d.objects)+compactAt {
		return
	}
	if err := d.compactLocked(); err != nil {
		d.log.WithError(err).WithField("disk", d.dir).Warn("cache disk: cannot compact the journal; it keeps growing")
		d.errors.Add(1)
	}
}

// compactLocked writes the live entries to a new journal and puts it in
// the old one's place: those hit since the hand passed them last, so that
// the next process loads them last, after the others (its hand starts
// at the first loaded).
func (d *disk) compactLocked() error {
	path := filepath.Join(d.dir, "journal")
	b := make([]byte, 0, len(journalHdr)+recordSize*d.objects)
	b = append(b, journalHdr...)
	for _, hit := range []bool{false, true} {
		d.ix.each(func(s slot, e *diskEntry) {
			if d.ix.ref(s) != hit || isSeg(e.id) && d.segs[segNo(e.id)] == nil {
				return // (an entry of a reclaimed segment is no object)
			}
			b = appendRecord(b, opAdd, e)
			if e.gen() > 0 {
				b = appendRecord(b, opHead, e)
			}
		})
	}
	if err := atomicfile.Write(path, b, 0o640); err != nil {
		return err
	}
	app, err := openNoFollow(path, os.O_WRONLY|os.O_APPEND)
	if err != nil {
		return errors.Join(err, d.journal.Close())
	}
	d.journal.Close()
	d.journal, d.jsize = app, int64(len(b))
	d.records = int64(d.objects)
	return nil
}
