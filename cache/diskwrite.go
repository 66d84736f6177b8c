package cache

// This file holds the writing of one object to the disk store while its
// response is relayed. The relaying goroutine only copies bytes into a
// bounded queue; a goroutine of the writer's own does the file I/O, so a
// slow disk never holds a client up: when the queue stays full the copy
// to disk is given up (the response is still relayed, and kept in memory
// when it fits). The object is committed (journaled and indexed) only
// after its last byte and checksums are written.

import (
	"errors"
	"hash/crc32"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// writeQueue bounds the chunks (of up to blockSize) a writer may hold:
// the memory a stored response in flight costs on its way to disk.
const writeQueue = 16

// queueWait is how long a full queue may hold the relay before the copy
// to disk is given up.
const queueWait = 100 * time.Millisecond

var chunkPool = sync.Pool{New: func() any { b := make([]byte, blockSize); return &b }}

type chunk struct {
	buf *[]byte
	n   int
}

// diskWriter writes one object.
type diskWriter struct {
	d      *disk
	e      diskEntry
	head   []byte
	q      chan chunk
	end    chan bool // the body ended: whole (true) or not
	abort  chan struct{}
	gaveUp atomic.Bool
	// done is closed when the goroutine has ended (and committed).
	done chan struct{}
	c    *Cache
	o    *Object
	// followed: followers read the file as it is written (set before
	// the first chunk is queued); written counts the body bytes in it.
	followed *stream
	// seg: a small object, built in rec and handed whole to the appender
	// (diskappend.go) at its end: no goroutine or queue of its own, and
	// no file; crcs are its body's block checksums.
	seg      bool
	rec      []byte
	crcs     []uint32
	doneOnce sync.Once // closes done (a small object's: given up, or sealed)

	// The end: whoever comes second of the goroutine ending and finish
	// calls committed.
	mu       sync.Mutex
	ended    bool
	finished bool
	flight   *Flight
	diskOnly bool
}

// startWriter begins storing o (its head is final; its body length
// bytes, -1 when not known) on disk; nil when the store does not take
// objects now. A small object goes to a segment (segWriter).
func (d *disk) startWriter(o *Object, c *Cache, length int64) *diskWriter {
	head := encodeHead(o)
	if d.small(len(head), length) {
		return d.segWriter(o, c, head, length)
	}
	if length >= 0 && fileSize(int64(len(head)), length) > maxEntrySize {
		return nil // more than an entry can name (1 TiB): not written at all
	}
	if !d.beginWrite() {
		return nil
	}
	w := &diskWriter{
		d: d, e: diskEntry{key: hashKey([]byte(o.Key)), sec: hashSecondary(o.secondary), id: d.nextID.Add(1)},
		head: head, q: make(chan chunk, writeQueue), end: make(chan bool, 1),
		abort: make(chan struct{}), done: make(chan struct{}), c: c, o: o,
	}
	go w.run()
	return w
}

// write queues a copy of p; false when the copy to disk was given up.
func (w *diskWriter) write(p []byte) bool {
	if w.gaveUp.Load() {
		return false
	}
	if w.seg {
		return w.segWrite(p)
	}
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for len(p) > 0 {
		bp := chunkPool.Get().(*[]byte)
		n := copy(*bp, p)
		p = p[n:]
		c := chunk{bp, n}
		select {
		case w.q <- c:
			continue
		default:
		}
		if t == nil {
			t = time.NewTimer(queueWait)
		}
		select {
		case w.q <- c:
		case <-t.C:
			chunkPool.Put(bp)
			w.giveUp()
			return false
		}
	}
	return true
}

// giveUp abandons the copy to disk.
func (w *diskWriter) giveUp() {
	if !w.gaveUp.CompareAndSwap(false, true) {
		return
	}
	if !w.seg {
		close(w.abort)
		return
	}
	// A small object has no goroutine to end: its followers and waiters
	// are told here.
	w.tell(0, false, true)
	w.doneOnce.Do(func() { close(w.done) })
}

// follow has the writer tell s how far the body in its file has got.
func (w *diskWriter) follow(s *stream) { w.followed = s }

// tell updates the followers' stream.
func (w *diskWriter) tell(n int64, done, failed bool) {
	s := w.followed
	if s == nil {
		return
	}
	s.mu.Lock()
	s.n, s.done, s.failed = n, s.done || done, s.failed || failed
	s.mu.Unlock()
	s.cond.Broadcast()
}

// finish ends a whole body. diskOnly says the memory tier has no copy:
// the object is put there as a head whose body is on disk, and flight
// (its followers) lands with it, once it is committed.
func (w *diskWriter) finish(f *Flight, diskOnly bool) {
	if w.seg {
		w.seal(f, diskOnly)
		return
	}
	w.mu.Lock()
	if w.ended {
		w.mu.Unlock()
		w.committed(nil, f, diskOnly)
		return
	}
	w.finished, w.flight, w.diskOnly = true, f, diskOnly
	w.mu.Unlock()
	w.end <- true
}

// committed makes a committed disk-only object visible in memory and
// lands its flight; with ref nil (not committed) the flight lands empty.
func (w *diskWriter) committed(ref *diskRef, f *Flight, diskOnly bool) {
	c := w.c
	if ref == nil {
		c.Land(f, nil, true)
		return
	}
	if !diskOnly {
		w.o.committed.Store(ref.id) // the object in memory knows its copy (a refresh writes its head there)
		return
	}
	ho := w.o.headCopy()
	ho.disk = ref
	ho.Size = ho.sizeWith(0)
	c.store.put(ho)
	c.Land(f, ho, false)
}

func (w *diskWriter) run() {
	d := w.d
	defer d.writers.Done()
	defer close(w.done)
	ref, err := w.writeFile()
	var replaced []diskEntry
	switch {
	case err == nil:
		w.tell(ref.bodyLen, true, false)
		ref, replaced, err = w.publish(ref)
	default:
		w.tell(0, false, true)
		os.Remove(d.objectPath(w.e.id))
	}
	if err != nil {
		ref = nil
		w.giveUp() // the relay stops queueing at once
		if !errors.Is(err, errAbandoned) {
			d.fault("write", err)
		}
	}
	w.mu.Lock()
	w.ended = true
	finished, f, diskOnly := w.finished, w.flight, w.diskOnly
	w.mu.Unlock()
	if finished {
		w.committed(ref, f, diskOnly)
	}
	// The files this one replaced go only now: a head in memory that
	// still names one is replaced above first.
	d.forget(replaced)
	// Chunks left behind go back to the pool.
	for {
		select {
		case c := <-w.q:
			chunkPool.Put(c.buf)
		default:
			return
		}
	}
}

// errAbandoned is a write given up on purpose (a response that broke
// off, the queue, a stopping store): not a disk fault.
var errAbandoned = errors.New("abandoned")

// writeFile writes the object file and returns where its body is.
func (w *diskWriter) writeFile() (*diskRef, error) {
	d := w.d
	// The file is written at its final name: until its journal record is
	// appended no lookup finds it, and one a crash left unnamed is swept.
	path := d.objectPath(w.e.id)
	f, err := createNoFollow(path)
	if errors.Is(err, os.ErrNotExist) {
		if err = d.objectDir(path); err == nil {
			f, err = createNoFollow(path)
		}
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Write(appendPrefix(make([]byte, 0, prefixSize+len(w.head)), w.head)); err != nil {
		return nil, err
	}
	var crcs []uint32
	var cur uint32
	var fill, n int64
	put := func(c chunk) error {
		p := (*c.buf)[:c.n]
		_, err := f.Write(p)
		for len(p) > 0 {
			k := min(int64(len(p)), blockSize-fill)
			cur = crc32.Update(cur, castagnoli, p[:k])
			fill, n, p = fill+k, n+k, p[k:]
			if fill == blockSize {
				crcs, cur, fill = append(crcs, cur), 0, 0
			}
		}
		chunkPool.Put(c.buf)
		if err == nil {
			w.tell(n, false, false)
		}
		return err
	}
	// ended writes what was queued before the body's end.
	ended := func(whole bool) error {
		for len(w.q) > 0 {
			if err := put(<-w.q); err != nil {
				return err
			}
		}
		if !whole {
			return errAbandoned
		}
		return nil
	}
	for done := false; !done; {
		select {
		case c := <-w.q:
			if err := put(c); err != nil {
				return nil, err
			}
		case <-w.abort:
			return nil, errAbandoned
		case <-w.d.stop:
			// The store stops: a body that has arrived whole is still
			// committed (a graceful stop keeps it); the rest is given up.
			select {
			case whole := <-w.end:
				if err := ended(whole); err != nil {
					return nil, err
				}
				done = true
			default:
				return nil, errAbandoned
			}
		case whole := <-w.end:
			if err := ended(whole); err != nil {
				return nil, err
			}
			done = true
		}
	}
	if fill > 0 {
		crcs = append(crcs, cur)
	}
	t := tail{bodyLen: n, headLen: uint32(len(w.head)), blocks: uint32(len(crcs)), headCRC: crc32.Checksum(w.head, castagnoli)}
	if _, err := f.Write(appendTail(nil, crcs, t)); err != nil {
		return nil, err
	}
	if d.fsync.Load() {
		if err := f.Sync(); err != nil {
			return nil, err
		}
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	size := fileSize(int64(len(w.head)), n)
	if size > maxEntrySize {
		return nil, errAbandoned // a body of unknown length past what an entry can name (1 TiB)
	}
	w.e.setSize(size)
	return &diskRef{c: w.c, id: w.e.id, bodyOff: bodyOffset(int64(len(w.head))), bodyLen: n, crcs: crcs}, nil
}

// publish journals the written file: from here on it is a stored object.
// It returns the entries it replaced or evicted, for the caller to forget.
func (w *diskWriter) publish(ref *diskRef) (*diskRef, []diskEntry, error) {
	d := w.d
	final := d.objectPath(w.e.id)
	e := w.e
	select { // the journal opens moments after start
	case <-d.journalOpen:
	case <-d.stop:
	}
	d.mu.Lock()
	if d.closed || d.closing && d.journal == nil { // closing before it opened: nowhere to commit
		d.mu.Unlock()
		os.Remove(final)
		return nil, nil, errAbandoned
	}
	if err := d.appendLocked(appendRecord(nil, opAdd, &e)); err != nil {
		d.mu.Unlock()
		os.Remove(final)
		return nil, nil, err
	}
	journal := d.journal
	s, dropped := d.insertLocked(e)
	if d.loading.Load() {
		d.newer[s] = struct{}{} // newer than any record the loader has yet to read
	} else {
		dropped = append(dropped, d.evictLocked()...)
	}
	d.mu.Unlock()
	if d.fsync.Load() {
		// Outside the lock: lookups and other commits go on meanwhile. A
		// journal replaced by a compaction was synced by it.
		if err := journal.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
			d.fault("fsync", err)
		}
	}
	d.maybeCompact()
	return ref, dropped, nil
}
