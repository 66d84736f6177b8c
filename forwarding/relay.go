package forwarding

// This file holds the relay of a final response to the client: the
// cache's part decided, the head and the body copied as they arrive, and
// the upstream connection returned to its pool when it stays usable.

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/peerd/peerd/internal/h1"
)

// relay sends the final response to the client as it arrives, and
// returns the upstream connection to its pool when it stays usable.
func (tx *txn) relay(a *attempt) outcome {
	c := a.conn
	cc := tx.cc
	resp := &a.resp
	if resp.Status == http.StatusSwitchingProtocols {
		return tx.upgraded(a)
	}
	f := tx.front
	if f != nil {
		if done, out := f.head(a); done {
			return out
		}
	}
	kind := resp.BodyFor(tx.method == http.MethodHead)
	chunked := false
	switch kind {
	case h1.ChunkedBody, h1.CloseBody:
		if tx.req.Minor == 1 {
			chunked = true
		} else {
			tx.keepAlive = false // HTTP/1.0: the end of the body is the close
		}
	}
	if !tx.bodyDone {
		tx.keepAlive = false
	}
	tx.answeredBy(a.hop)
	tx.out = tx.responseHead(tx.out[:0], resp, kind, chunked)
	tx.ctype = append(tx.ctype[:0], resp.Get("Content-Type")...)
	cc.w.Write(tx.out)
	tx.sendHead(resp.Status)
	a.progress = sentToClient
	c.r.Release(a.head)
	a.head = nil
	a.body.Reset(c.r, kind, resp.ContentLength, tx.cfg.maxHeader)
	err := a.copyBody(chunked)
	settle := false
	if f != nil {
		// A client that left may still have let the whole body reach the
		// cache (clientLeft).
		settle = f.end(a.body.Done() && (err == nil || errors.Is(err, errClientGone)))
	}
	if err == nil && chunked {
		h1.WriteLastChunk(cc.w, a.body.Trailer)
	}
	if err == nil {
		if tx.after() == keepOpen && cc.r.Buffered() == 0 && cc.rio.raw != nil && !settle {
			tx.flushLater = true // sent while waiting for the next request
		} else if cc.w.Flush() != nil {
			err = errClientGone
		}
	}
	// A body kept on disk only is visible once committed: the client has
	// it all, and its next request finds it stored.
	if settle {
		f.settle()
	}
	a.end(err == nil && kind != h1.CloseBody, tx.start)
	if err != nil {
		// A body that broke halfway: the client must see a cut, never a
		// spliced answer; the connection is closed.
		if errors.Is(err, errClientGone) {
			tx.clientGone = true
		}
		return closeConn
	}
	return tx.after()
}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyBody copies the response body to the client, flushing whenever the
// next read would wait for the network, so that a streamed answer reaches
// the client as it arrives while a short one costs one write.
func (a *attempt) copyBody(chunked bool) error {
	tx, c := a.tx, a.conn
	cc := tx.cc
	if a.body.Done() {
		return nil
	}
	bufp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bufp)
	for !a.body.Done() {
		if c.r.Buffered() == 0 {
			if cc.w.Flush() != nil {
				return a.clientLeft(*bufp)
			}
			c.dl.readIn(time.Now(), tx.cfg.ReadTimeout)
		}
		n, err := a.body.Read(*bufp)
		if n > 0 {
			if tx.front != nil {
				tx.front.body((*bufp)[:n], a.body.Done())
			}
			var werr error
			if chunked {
				werr = h1.WriteChunk(cc.w, (*bufp)[:n])
			} else {
				_, werr = cc.w.Write((*bufp)[:n])
			}
			if werr != nil {
				return a.clientLeft(*bufp)
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// clientLeft is what becomes of a body whose client went away: one the
// cache is storing goes on to its end when its quick_abort settings say
// it is worth finishing (Squid's quick_abort_*), so that the next client
// finds it stored; either way the client is gone.
func (a *attempt) clientLeft(buf []byte) error {
	tx, c := a.tx, a.conn
	length := int64(-1)
	if a.resp.BodyFor(false) == h1.LengthBody {
		length = a.resp.ContentLength
	}
	if tx.front == nil || a.body.Done() || !tx.front.finishAborted(a.body.Count, length) {
		return errClientGone
	}
	for !a.body.Done() {
		c.dl.readIn(time.Now(), tx.cfg.ReadTimeout)
		n, err := a.body.Read(buf)
		if n > 0 {
			tx.front.body(buf[:n], a.body.Done())
		}
		if err != nil {
			break
		}
	}
	return errClientGone
}
