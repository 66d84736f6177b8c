package forwarding

// This file holds the cache's part of a request: its state, and its
// steps around the forward. Before the forward it looks the request up
// and may answer it (cached.go); during the forward it is the sink the
// response is relayed through, a decorator of the client writer that
// stores what passes, and may answer from the cache instead (a 304 that
// refreshed a stored response, a stale one standing in for a 5xx); after
// the forward it may answer when no next hop did (stale_if_dead); when
// the request ends it lands what it led. It reads the request and writes
// to the client writer; it never sees the transaction.

import (
	"errors"
	"time"

	"github.com/peerd/peerd/cache"
)

// cacheLayer is the cache's part of one request: what was looked up and
// found, the flight it leads or followed, the response it stores. It is
// reused from request to request.
type cacheLayer struct {
	rq   *request
	w    *clientWriter
	side clientSide

	ch        *cache.Cache // nil: the request is not the cache's
	cq        cache.Request
	keyed     bool              // cq holds this request
	fwd       string            // why the request went to a next hop (Cache-Status fwd)
	flight    *cache.Flight     // the collapsed flight this request leads
	cw        *cache.Writer     // storing the response as it is relayed
	diskBody  *cache.BodyReader // the open body of a disk-only object
	collapsed bool              // answered from another request's response
	swr       bool              // answered stale while it is revalidated
	refetch   bool              // a 304 selected nothing stored: forward again (offer)
	result    string            // the access log's result code, when the cache made it
	ctype     []byte            // the Content-Type of an answer from the cache
	out       []byte            // the head of an answer from the cache
}

func (l *cacheLayer) init(rq *request, w *clientWriter, side clientSide) {
	l.rq, l.w, l.side = rq, w, side
}

// reset clears the layer for a new request, keeping its buffers.
func (l *cacheLayer) reset() {
	*l = cacheLayer{rq: l.rq, w: l.w, side: l.side, cq: l.cq, out: l.out[:0], ctype: l.ctype[:0]}
}

// The decorator's part of the sink (forward.go) beyond offer and fields
// (cached.go).

func (l *cacheLayer) body(p []byte, last bool) error {
	l.cw.Write(p)
	if last && l.cw != nil {
		// The last bytes: stored before the client has them all.
		l.cw.Finish(true)
		l.cw.AwaitDisk(diskCommitWait)
	}
	return l.w.bodyBytes(p)
}

func (l *cacheLayer) keepOnAbort(got, length int64) bool {
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

func (l *cacheLayer) passThrough() bool { return l.cw == nil }

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

// streamObject writes an object's body, following it while it is still
// arriving for the request that fetches it; a body that broke off there
// cuts this client off too (it was promised the whole length).
// errObjectCut: the body of an object being shared broke upstream (its
// fetch was cut) while it was served.
var errObjectCut = errors.New("the shared answer's body was cut upstream")

func (l *cacheLayer) streamObject(o *cache.Object) error {
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
			if err := l.w.write(p); err != nil {
				return err
			}
			off += int64(len(p))
		}
		if failed {
			return errObjectCut
		}
		if done && off >= o.Length() {
			return nil
		}
		if !done && l.w.flush() != nil {
			return errClientGone
		}
	}
}

// errorStatus is the Cache-Status of an answer peerd made itself for a
// request the cache saw.
func (l *cacheLayer) errorStatus() string {
	if l.ch == nil || l.fwd == fwdNone {
		return ""
	}
	return "Cache-Status: " + l.rq.gen.cfg.Name + "; fwd=" + l.fwd + "\r\n"
}
