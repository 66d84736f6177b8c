package forwarding

// This file holds the cache as a layer in front of the forwarder: the
// two small interfaces between them (forwarder, front), the layer's
// per-request state, the writing of stored bodies to the client (from
// memory, from a file being written, or from the disk tier), and what it
// does when the request ends.

import (
	"time"

	"github.com/peerd/peerd/cache"
)

// forwarder is the forwarder as the cache layer sees it: send the request
// on along its plan and relay the answer to the client, telling f (the
// layer in front, or nil) what goes through.
type forwarder interface {
	forward(f front) outcome
}

// front is the layer in front of the forwarder, as the forwarder sees it:
// what it adds to the request sent on, and what it does with the answer
// relayed. The cache layer is the one; a request no cache sees has none.
type front interface {
	// revalidating is the stored response the request revalidates: its
	// validators are sent instead of the client's. nil for none.
	revalidating() *cache.Object
	// head is given a final response head before any of it reaches the
	// client. handled means the layer answered the client itself (a 304
	// that refreshed a stored response, a stale one standing in for a
	// 5xx) and released the attempt.
	head(a *attempt) (handled bool, out outcome)
	// appendStatus appends the layer's Cache-Status to a relayed head.
	appendStatus(b []byte, status int) []byte
	// body is given each piece of the body as it is relayed, before the
	// client has it; last says the body is whole with it.
	body(p []byte, last bool)
	// finishAborted says whether a body being stored goes on to its end
	// after the client left, having got bytes of length (-1: not known).
	finishAborted(got, length int64) bool
	// end says the relay is over (whole: the body arrived complete). It
	// reports whether the layer must settle after the client has the
	// whole answer, which must then be flushed, not left buffered.
	end(whole bool) (settle bool)
	// settle waits (briefly) for what end started: a response kept on
	// disk only is visible once it is committed.
	settle()
	// unanswered is told that no next hop answered (e is the error the
	// client would get): the layer may answer instead (stale_if_dead).
	unanswered(e *Error) (handled bool, out outcome)
}

// cacheLayer is the cache's part of one request: what was looked up and
// found, the flight it leads or followed, the response it stores. It is
// reused from request to request, as its transaction is.
type cacheLayer struct {
	tx        *txn
	ch        *cache.Cache
	cq        cache.Request
	keyed     bool              // cq holds this request
	fwd       string            // why the request went to a next hop (Cache-Status fwd)
	stale     *cache.Object     // the stored response being revalidated
	flight    *cache.Flight     // the collapsed flight this request leads
	cw        *cache.Writer     // storing the response as it is relayed
	diskBody  *cache.BodyReader // the open body of a disk-only object
	collapsed bool              // answered from another request's response
	swr       bool              // answered stale while it is revalidated
	result    string            // the access log's result code, when the cache made it
}

// reset makes l the cache layer of tx's request, keeping its buffers.
func (l *cacheLayer) reset(tx *txn, ch *cache.Cache) {
	*l = cacheLayer{tx: tx, ch: ch, cq: l.cq}
}

// serve answers the request from the cache when it can, and otherwise
// has fw forward it with the layer in front.
func (l *cacheLayer) serve(fw forwarder) outcome {
	if done, out := l.lookup(); done {
		return out
	}
	return fw.forward(l)
}

func (l *cacheLayer) revalidating() *cache.Object { return l.stale }

func (l *cacheLayer) body(p []byte, last bool) {
	l.cw.Write(p)
	if last && l.cw != nil {
		// The last bytes: stored before the client has them all.
		l.cw.Finish(true)
		l.cw.AwaitDisk(diskCommitWait)
	}
}

func (l *cacheLayer) finishAborted(got, length int64) bool {
	return l.cw != nil && l.ch.FinishAborted(got, length)
}

func (l *cacheLayer) end(whole bool) bool {
	if l.cw == nil {
		return false
	}
	l.cw.Finish(whole)
	l.cw.AwaitDisk(diskCommitWait)
	return l.cw.Pending()
}

func (l *cacheLayer) settle() { l.cw.Settle() }

// diskCommitWait bounds how long a stored response's last bytes wait for
// its disk commit (well under a millisecond on a healthy disk).
const diskCommitWait = 25 * time.Millisecond

// done ends the layer's part when the request ends: a flight it leads and
// did not land, or a response it did not store whole, ends here (the
// followers go on their own), and an open disk body is closed.
func (l *cacheLayer) done() {
	if l.ch == nil {
		return
	}
	l.ch.Land(l.flight, nil, false)
	l.flight = nil
	if l.cw.Stored() {
		l.cw.Finish(false)
	}
	if l.diskBody != nil {
		l.diskBody.Close()
		l.diskBody = nil
	}
}

// openBody opens a disk-only object's body for this request (once: a
// refreshed object reads the same file); false when it is gone, and was
// dropped: the request is a miss.
func (l *cacheLayer) openBody(o *cache.Object) bool {
	if !o.OnDisk() {
		return true
	}
	if l.diskBody != nil && l.diskBody.Serves(o) {
		return true
	}
	br, err := o.OpenBody()
	if err != nil {
		return false
	}
	if l.diskBody != nil {
		l.diskBody.Close()
	}
	l.diskBody = br
	return true
}

// bodyWriter writes a stored body to the client, counting its bytes.
type bodyWriter struct{ l *cacheLayer }

func (w bodyWriter) Write(p []byte) (int, error) {
	if err := w.l.writeStored(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (l *cacheLayer) writeStored(p []byte) error {
	tx := l.tx
	if _, err := tx.cc.w.Write(p); err != nil {
		tx.clientGone = true
		return err
	}
	return nil
}

// streamObject writes an object's body, following it while it is still
// arriving for the request that fetches it; a body that broke off there
// cuts this client off too (it was promised the whole length).
func (l *cacheLayer) streamObject(o *cache.Object) error {
	tx := l.tx
	next := o.Stream
	if o.FromDiskWriter() {
		// A disk-only body being written: read from its file.
		bs := o.NewBodyStream()
		defer bs.Close()
		next = bs.Next
	}
	for off := int64(0); ; {
		p, done, failed := next(off)
		if len(p) > 0 {
			if err := l.writeStored(p); err != nil {
				return err
			}
			off += int64(len(p))
		}
		if failed {
			return errClientGone
		}
		if done && off >= o.Length() {
			return nil
		}
		if !done && tx.cc.w.Flush() != nil {
			tx.clientGone = true
			return errClientGone
		}
	}
}
