package cache

// This file holds the writing of small objects: their writer builds the
// segment record in memory as the body is relayed (a copy, no I/O and no
// goroutine of its own), and hands it whole to the appender, one
// goroutine per disk store that writes records to the segment being
// written and journals them, in batches. The records waiting when it
// wakes go to the segment in one write and to the journal in one more
// (one fsync each, with disk_fsync), so a store taking many small objects
// pays two system calls a batch, not two an object; a record waits for
// no timer, only for the batch being written before it. When the
// appender is that far behind that its queue is full, the object is not
// stored (as a full queue gives a large object's copy up): the relay
// never waits for the disk.

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"runtime"
	"sync"
)

// segAppend is one record handed to the appender, and what came of it.
type segAppend struct {
	w       *diskWriter
	rec     []byte // the header's room, then the object's file
	e       diskEntry
	dropped []diskEntry // the entries it replaced, or evicted, to forget
	err     error
}

// segWriter begins storing small object o (head encoded, its body length
// bytes) in a segment; nil when the store does not take objects now.
func (d *disk) segWriter(o *Object, c *Cache, head []byte, length int64) *diskWriter {
	if !d.storing() {
		return nil
	}
	w := &diskWriter{d: d, e: diskEntry{key: hashKey([]byte(o.Key)), sec: hashSecondary(o.secondary)},
		head: head, done: make(chan struct{}), c: c, o: o, seg: true}
	w.rec = appendPrefix(recBuf(int(segHeader + fileSize(int64(len(head)), length)))[:segHeader], head)
	return w
}

// recBufs are record buffers the appender is done with, for the next
// small objects: a store taking thousands a second allocated (and the GC
// swept) one of each object's size each time.
var recBufs sync.Pool

// recBuf is a buffer for a record of about n bytes, from recBufs when
// one there is large enough.
func recBuf(n int) []byte {
	if b, ok := recBufs.Get().(*[]byte); ok && cap(*b) >= n {
		return (*b)[:0]
	}
	return make([]byte, 0, n)
}

// freeRec gives a record buffer back once nothing reads it.
func freeRec(b []byte) {
	if cap(b) > 0 && cap(b) <= 2*segObject {
		b = b[:0]
		recBufs.Put(&b)
	}
}

// segWrite copies relayed body bytes into the record.
func (w *diskWriter) segWrite(p []byte) bool {
	if len(w.rec)+len(p) > segObject {
		w.giveUp() // longer than its length said
		return false
	}
	w.rec = append(w.rec, p...)
	return true
}

// seal ends a small object's record (its block checksums and tail) and
// hands it to the appender; f and diskOnly are for committed.
func (w *diskWriter) seal(f *Flight, diskOnly bool) {
	w.flight, w.diskOnly = f, diskOnly
	body := w.rec[segHeader+bodyOffset(int64(len(w.head))):]
	for off := 0; off < len(body); off += blockSize {
		w.crcs = append(w.crcs, crc32.Checksum(body[off:min(off+blockSize, len(body))], castagnoli))
	}
	t := tail{bodyLen: int64(len(body)), headLen: uint32(len(w.head)), blocks: uint32(len(w.crcs)), headCRC: crc32.Checksum(w.head, castagnoli)}
	w.rec = appendTail(w.rec, w.crcs, t)
	d := w.d
	if w.gaveUp.Load() || len(w.rec) > segObject || !d.beginWrite() {
		w.sealed(nil, errAbandoned)
		return
	}
	select {
	case d.segQ <- &segAppend{w: w, rec: w.rec, e: w.e}:
	default:
		w.sealed(nil, errAbandoned) // the appender is behind: not stored
		d.writers.Done()
	}
}

// sealed ends a small object's write: stored (a, from the appender) or
// not (a nil, err why).
func (w *diskWriter) sealed(a *segAppend, err error) {
	var ref *diskRef
	if a != nil {
		err = a.err
	}
	if err == nil {
		w.e = a.e
		bodyLen := int64(len(w.rec)) - segHeader - bodyOffset(int64(len(w.head))) - 4*int64(len(w.crcs)) - tailSize
		ref = &diskRef{c: w.c, id: w.e.id, bodyOff: segOff(w.e.id) + segHeader + bodyOffset(int64(len(w.head))), bodyLen: bodyLen, crcs: w.crcs}
		w.tell(bodyLen, true, false)
	} else {
		w.tell(0, false, true)
		if !errors.Is(err, errAbandoned) {
			w.d.fault("write", err)
		}
	}
	freeRec(w.rec)
	w.rec = nil
	if a != nil {
		a.rec = nil
	}
	w.committed(ref, w.flight, w.diskOnly)
	w.doneOnce.Do(func() { close(w.done) })
	if a != nil {
		w.d.forget(a.dropped)
	}
}

// Bounds of one batch.
const (
	appendBatch    = 64
	appendMaxBytes = 1 << 20
)

// runAppender writes batches until segQ is closed (the store closed,
// once no writer is left).
func (d *disk) runAppender() {
	defer close(d.appenderDone)
	var batch []*segAppend
	var buf []byte
	for a := range d.segQ {
		// The relays that are runnable now finish their records before
		// the batch is taken: without this yield a batch was 1.07
		// records on average, with 16 clients storing 4 KiB objects,
		// and the store cost 1.35-1.54x memory-only against 1.12-1.21x
		// with it (bench smallstore, two A/B pairs). Nothing waits on
		// a timer.
		runtime.Gosched()
		batch = append(batch[:0], a)
		n := len(a.rec)
	more:
		for len(batch) < appendBatch && n < appendMaxBytes {
			select {
			case b, ok := <-d.segQ:
				if !ok {
					break more
				}
				batch, n = append(batch, b), n+len(b.rec)
			default:
				break more
			}
		}
		buf = d.writeBatch(batch, buf[:0])
	}
}

// writeBatch writes a batch to the segment being written (starting the
// next one when it would not fit), journals it and puts it in the index,
// as publish does for an object of its own file.
func (d *disk) writeBatch(batch []*segAppend, buf []byte) []byte {
	defer func() {
		for _, a := range batch {
			a.w.sealed(a, nil)
			d.writers.Done()
		}
	}()
	fail := func(err error) []byte {
		for _, a := range batch {
			a.err = err
		}
		return buf
	}
	var total int64
	for _, a := range batch {
		total += int64(len(a.rec))
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return fail(errAbandoned)
	}
	if d.segFile == nil || d.segs[d.segActive] == nil || d.segs[d.segActive].size+total > d.segLimitLocked() {
		if err := d.startSegmentLocked(); err != nil {
			d.mu.Unlock()
			return fail(err)
		}
	}
	s := d.segs[d.segActive]
	no, f, off := d.segActive, d.segFile, s.size
	s.size += total
	if s.size > s.alloc { // dead until the journal names them
		d.dead += s.size - s.alloc
		s.alloc = s.size
	}
	d.mu.Unlock()
	at := off
	for _, a := range batch {
		binary.BigEndian.PutUint32(a.rec, uint32(len(a.rec)-segHeader))
		binary.BigEndian.PutUint32(a.rec[4:], crcOf(a.rec[:4]))
		a.e.id = segID(no, at)
		a.e.setSize(int64(len(a.rec)))
		at += int64(len(a.rec))
	}
	out := batch[0].rec // one record (most batches) is written as it is
	if len(batch) > 1 {
		for _, a := range batch {
			buf = append(buf, a.rec...)
		}
		out = buf
	}
	if _, err := f.WriteAt(out, off); err != nil {
		return fail(err)
	}
	if d.fsync.Load() {
		if err := f.Sync(); err != nil {
			return fail(err)
		}
	}
	var rec []byte
	for _, a := range batch {
		rec = appendRecord(rec, opAdd, &a.e)
	}
	d.mu.Lock()
	if d.closed || d.journal == nil {
		d.mu.Unlock()
		return fail(errAbandoned)
	}
	if err := d.appendLocked(rec); err != nil {
		d.mu.Unlock()
		return fail(err)
	}
	journal := d.journal
	for _, a := range batch {
		_, a.dropped = d.insertLocked(a.e)
	}
	batch[0].dropped = append(batch[0].dropped, d.evictLocked()...)
	d.mu.Unlock()
	if d.fsync.Load() {
		if err := journal.Sync(); err != nil {
			d.fault("fsync", err)
		}
	}
	d.maybeCompact()
	return buf
}
