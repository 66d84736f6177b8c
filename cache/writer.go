package cache

// This file holds the storing of a response while it is relayed: the
// memory tier's copy (bounded by the in-flight budget) and, with a disk
// store, the disk tier's copy (diskwrite.go).

import (
	"time"

	"github.com/peerd/peerd/internal/h1"
)

// Storing.

// Writer stores one response while it is relayed: the client gets the
// bytes as they arrive, the store a copy. A response that grows past
// max_object, or breaks off, is dropped without harming the client. With
// a disk store every response is written to disk, and the memory tier
// keeps a copy of those within max_object_in_memory.
type Writer struct {
	c *Cache
	o *Object
	f *Flight // the flight to land when the object ends (nil: landed)
	// listed is a flight landed with the object while its body streams,
	// left on its key until the object is stored or given up.
	listed *Flight
	length int64 // -1: not known until the end
	max    int64 // max_object
	memMax int64 // the most the memory copy may hold
	n      int64
	dead   bool
	mem    bool        // the memory tier keeps a copy
	dw     *diskWriter // the disk tier's copy; nil: none
	// settle: a disk-only object whose commit is still to come
	settle *diskWriter
	// reserved is what this writer holds of the in-flight budget.
	reserved int64
}

// Admit decides whether the response to r (its head; length is its
// body's length, -1 when unknown) is stored. It returns nil when not,
// and then a flight r leads is landed empty: the waiting requests go to
// the next hop on their own and the key is not collapsed for a while.
// An error (5xx) that is not stored says nothing of the URL, only that
// the leader failed: its followers elect a new leader, one of them goes
// to the next hop, and the others keep waiting, rather than all going at
// once to a next hop that is failing.
func (c *Cache) Admit(r *Request, resp *h1.Response, length int64, reqTime, respTime time.Time, f *Flight) *Writer {
	return c.admit(r, resp, length, reqTime, respTime, f, false)
}

// AdmitHot is Admit for a hot copy: an object a fleet member fetched
// through the key's owner. Hot copies take at most an eighth of the
// memory; past that one is relayed, not stored (and never goes to disk:
// the owner keeps the object).
func (c *Cache) AdmitHot(r *Request, resp *h1.Response, length int64, reqTime, respTime time.Time, f *Flight) *Writer {
	if length < 0 || c.store.hotBytes()+length > c.store.capacity()/8 {
		c.Land(f, nil, true)
		return nil
	}
	return c.admit(r, resp, length, reqTime, respTime, f, true)
}

func (c *Cache) admit(r *Request, resp *h1.Response, length int64, reqTime, respTime time.Time, f *Flight, hot bool) *Writer {
	st := c.cfg()
	o, ok := c.build(r, resp, reqTime, respTime)
	if !ok || length > st.maxObject {
		c.Land(f, nil, resp.Status < 500)
		return nil
	}
	o.hot = hot
	o.Key = string(r.Key)
	w := &Writer{c: c, o: o, f: f, length: length, max: st.maxObject, memMax: st.maxInMemory}
	// A body that could never be kept in memory (larger than its shard's
	// share) is not copied there; one that would take more than the
	// in-flight budget allows neither, so memory stays bounded.
	w.mem = length <= st.maxInMemory &&
		(length < 0 || c.store.fits(o.Key, o.sizeWith(length))) &&
		(length <= 0 || w.reserve(length))
	if c.disk != nil && !hot {
		w.dw = c.disk.startWriter(o, c, length)
	}
	switch {
	case !w.mem && w.dw == nil:
		c.Land(f, nil, true)
		return nil
	case w.mem:
		o.stream = &stream{}
		o.stream.cond.L = &o.stream.mu
		o.length = length
		if length >= 0 {
			// The length is known: followers stream from the object as
			// its body arrives.
			c.landStreaming(f, o)
			w.f, w.listed = nil, f
		}
	case length >= 0:
		// Only the disk keeps it: followers read its file as the disk
		// writer writes it.
		o.stream = &stream{disk: w.dw}
		o.stream.cond.L = &o.stream.mu
		o.length = length
		w.dw.follow(o.stream)
		c.landStreaming(f, o)
		w.f, w.listed = nil, f
	}
	return w
}

// reserve takes n bytes of the in-flight budget.
func (w *Writer) reserve(n int64) bool {
	c := w.c
	if c.inflight.Add(n) > c.cfg().inflightMax {
		c.inflight.Add(-n)
		c.overBudget.Add(1)
		return false
	}
	w.reserved += n
	return true
}

// unreserve gives back what the writer holds of the budget.
func (w *Writer) unreserve() {
	w.c.inflight.Add(-w.reserved)
	w.reserved = 0
}

// growth is the least a body grows by at once.
const growth = 32 << 10

// Write copies relayed body bytes. The memory copy grows as bytes arrive
// (never the whole Content-Length at once), within the in-flight budget;
// the disk copy is queued to its writer.
func (w *Writer) Write(p []byte) {
	if w == nil || w.dead || len(p) == 0 {
		return
	}
	limit := w.max
	if w.length >= 0 {
		limit = w.length
	}
	if w.n+int64(len(p)) > limit {
		w.fail()
		return
	}
	if w.dw != nil && !w.dw.write(p) {
		w.dw = nil
	}
	if w.mem && !w.writeMem(p) {
		if w.dw == nil || w.length >= 0 {
			w.fail()
			return
		}
		// Past max_object_in_memory, a body of unknown length is kept on
		// disk only (no follower reads it before it ends).
		w.dropMem()
	}
	if !w.mem && w.dw == nil {
		w.fail()
		return
	}
	w.n += int64(len(p))
}

// writeMem appends p to the memory copy; false when it would outgrow
// max_object_in_memory or the in-flight budget.
func (w *Writer) writeMem(p []byte) bool {
	o := w.o
	limit := w.memMax
	if w.length >= 0 {
		limit = w.length
	}
	body := o.Body
	if need := int64(len(body) + len(p)); need > int64(cap(body)) {
		if need > limit {
			return false
		}
		c := min(max(2*int64(cap(body)), need, growth), limit)
		if w.length < 0 && c > w.reserved && !w.reserve(c-w.reserved) {
			return false
		}
		nb := make([]byte, len(body), c)
		copy(nb, body)
		body = nb
	}
	body = append(body, p...)
	s := o.stream
	s.mu.Lock()
	o.Body, s.n = body, int64(len(body))
	s.mu.Unlock()
	s.cond.Broadcast()
	return true
}

// dropMem gives the memory copy up.
func (w *Writer) dropMem() {
	w.mem = false
	w.unreserve()
	s := w.o.stream
	s.mu.Lock()
	w.o.Body, s.n = nil, 0
	s.mu.Unlock()
}

func (w *Writer) fail() {
	w.dead = true
	w.unreserve()
	if w.dw != nil {
		w.dw.giveUp()
	}
	if s := w.o.stream; s != nil {
		s.mu.Lock()
		s.failed = true
		s.mu.Unlock()
		s.cond.Broadcast()
	}
	w.c.Land(w.f, nil, true)
	w.c.Land(w.listed, nil, true) // off its key
}

// Finish ends the body: complete says it arrived whole, and the object
// is stored; otherwise it is dropped.
func (w *Writer) Finish(complete bool) {
	if w == nil || w.dead {
		return
	}
	o := w.o
	if !complete || (w.length >= 0 && w.n != w.length) {
		w.fail()
		return
	}
	w.dead = true
	if !w.mem {
		// On disk only: it is visible, and its followers are served,
		// once the disk has it whole.
		f := w.f
		if f == nil {
			f = w.listed // landed streaming: the commit takes it off its key
		}
		w.dw.finish(f, true)
		w.settle = w.dw
		return
	}
	if w.length < 0 {
		// A body of unknown length: no follower reads it before this
		// (its flight lands below), so it is trimmed of slack and its
		// length set without the stream's lock.
		if cap(o.Body) > len(o.Body)+len(o.Body)/8 {
			o.Body = append([]byte(nil), o.Body...)
		}
		o.length = int64(len(o.Body))
	}
	w.unreserve()
	o.Size = o.sizeWith(int64(len(o.Body)))
	w.c.put(o)
	s := o.stream
	s.mu.Lock()
	s.n, s.done = w.n, true
	s.mu.Unlock()
	s.cond.Broadcast()
	w.c.Land(w.f, o, false)
	w.c.Land(w.listed, o, false) // stored: off its key
	if w.dw != nil {
		w.dw.finish(nil, false)
	}
}

// AwaitDisk waits, at most wait, until the disk has committed the
// response just finished: called before the client is sent its last
// bytes, so that a response a client has whole is, on a healthy disk,
// already stored (a kill -9 right after it keeps it). A slow disk costs
// the client at most wait.
func (w *Writer) AwaitDisk(wait time.Duration) {
	if w == nil || w.dw == nil || !w.dead {
		return
	}
	waitDone(w.dw.done, wait)
}

// waitDone waits until done is closed, at most d.
func waitDone(done <-chan struct{}, d time.Duration) {
	select {
	case <-done:
		return
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// settleWait bounds how long Settle waits for the disk.
const settleWait = 2 * time.Second

// Pending reports a disk-only object that is not visible until its
// commit: call Settle once the client has the whole response.
func (w *Writer) Pending() bool { return w != nil && w.settle != nil }

// Settle waits (a bounded while) until a disk-only object just finished
// is committed, so that the next request on the connection finds it. The
// client has its response by then: only its next request waits.
func (w *Writer) Settle() {
	if w == nil || w.settle == nil {
		return
	}
	waitDone(w.settle.done, settleWait)
	w.settle = nil
}

// Stored reports whether the writer is still keeping the response.
func (w *Writer) Stored() bool { return w != nil && !w.dead }

// InMemory reports whether the memory tier is keeping a copy: the
// response is then stored once its body has arrived whole. A disk-only
// copy is stored only at its commit, after the body (and the head that
// could have said so) went to the client.
func (w *Writer) InMemory() bool { return w.Stored() && w.mem }

// objectOverhead approximates an object's bookkeeping bytes.
const objectOverhead = 256

// sizeWith is what o weighs in the memory store with a body of bodyLen
// bytes.
func (o *Object) sizeWith(bodyLen int64) int64 {
	return int64(len(o.Key)+len(o.secondary)+len(o.fields)) + bodyLen + objectOverhead
}

// put stores o; a complete response replaces the partial ones of its
// variant.
func (c *Cache) put(o *Object) {
	c.store.put(o)
	if !o.partial {
		c.store.dropPartials(o)
	}
}
