package forwarding

// This file holds a client connection: its acceptance from a listener,
// its loop over requests (each begins a transaction), the wait for each
// head, the refusal of heads that cannot be read, and the watcher that
// notices a client leaving while peerd waits on a next hop.

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/peerd/peerd/internal/h1"
)

// clientConn is one client connection. Requests on it are handled one at
// a time, in order, so pipelined requests are answered in order; the
// buffers and the transaction record are reused from request to request.
type clientConn struct {
	p   *Proxy
	nc  net.Conn
	r   *h1.Reader
	w   clientWriter
	dl  deadlines
	rio rawIO

	from client
	// graced: stopping, the idle wait was cut to the grace's end
	// (connSet.closeIdle, under its lock).
	graced bool

	// counted: the connection holds a max_connections slot and one of its
	// source's (released when it ends). refusal: its source is outside
	// [proxy] allow; it is answered 403 once and closed.
	counted, refusal bool

	idle atomic.Bool // waiting for a request (Shutdown may close it)
	// tun is the tunnel that has the connection (tunnel.go: a CONNECT's
	// is detached from the goroutine that served it); its sockets are
	// closed by it alone.
	tun  atomic.Pointer[tunnelRun]
	tx   txn
	memo requestMemo // the last request's counter
}

func newClientConn(p *Proxy, nc net.Conn) *clientConn {
	cc := &clientConn{p: p, nc: nc}
	cc.dl = deadlines{nc: nc}
	cc.r = h1.NewReader(nc, 4<<10)
	cc.rio = newRawIO(nc, cc.r, &cc.idle)
	cc.rio.init()
	cc.w.init(nc, &cc.dl, &cc.rio, &p.conns)
	if ap, err := netip.ParseAddrPort(nc.RemoteAddr().String()); err == nil {
		cc.from = client{addr: ap.Addr().Unmap(), ok: true, port: ap.Port()}
		cc.from.str = cc.from.addr.String()
	} else {
		cc.from.str = nc.RemoteAddr().String()
	}
	cc.tx.init(cc)
	return cc
}

// serve handles requests until the connection closes or must close (or
// is parked, park.go).
func (cc *clientConn) serve() {
	if !cc.p.conns.add(cc) {
		cc.end(false)
		return
	}
	cc.loop(true)
}

// end closes the connection (lingering when an answer it made may be
// followed by unread bytes) and releases its slots.
func (cc *clientConn) end(linger bool) {
	p := cc.p
	p.conns.remove(cc)
	if cc.w.flushLater {
		// The end of an answer waited to go out with the next
		// request's wait, and there is none: it goes now, or the
		// close would cut it.
		cc.w.flushLater = false
		cc.w.flush()
	}
	if linger {
		lingerClose(cc.nc)
	} else {
		cc.nc.Close()
	}
	switch {
	case cc.counted:
		p.conns.release()
		p.conns.releaseSource(cc.from.addr)
	case cc.refusal:
		p.conns.refusing.Add(-1)
	}
}

// loop serves requests, the first one on a new connection when first;
// it returns once the connection ended or was parked.
func (cc *clientConn) loop(first bool) {
	p := cc.p
	linger, parked := false, false
	defer func() {
		if !parked {
			cc.end(linger)
		}
	}()
	for ; ; first = false {
		c := p.config()
		if cc.r.Buffered() == 0 {
			ok, park := cc.await(c, first)
			if park {
				parked = true
				return
			}
			if !ok {
				return // idle timeout, client closed, or shutdown
			}
		}
		start := time.Now()
		if !cc.r.HeadBuffered(c.maxHeader) {
			// The head did not come whole: the rest must follow within
			// request_timeout of its first byte.
			cc.dl.readIn(start, c.RequestTimeout)
		}
		head, err := cc.r.ReadHead(c.maxHeader)
		if err != nil {
			linger = cc.refuse(start, err)
			return
		}
		tx := &cc.tx
		g := p.acquire()
		tx.begin(g, start, head)
		cc.r.Release(head)
		out := tx.serve()
		if out == detached {
			// The tunnel has the connection and the generation now, and
			// ends them once this goroutine is done with them.
			parked = true
			cc.tun.Load().done() // this goroutine's share
			return
		}
		g.release() // its last request done, a replaced generation ends
		if cc.refusal {
			out = closeConn
		}
		// An answer peerd made itself on a connection it then closes (a
		// refusal, a bad request) may leave unread request bytes behind:
		// closing at once would reset the connection before the client
		// read the answer.
		linger = out == closeConn && tx.code != "" && !cc.w.gone
		if out != keepOpen {
			return
		}
		if p.conns.closing() {
			// An answer that began before the stop kept the connection:
			// its next request comes within the grace.
			if cc.w.flush() != nil {
				return
			}
			continue
		}
		if cc.w.flushLater {
			idleFrom := time.Now()
			wait, parkable := cc.idleWait(c.ClientIdleTimeout)
			if !cc.w.flushAndWait(wait, &cc.idle) {
				if parkable && cc.w.waitTimedOut() && cc.parkable() {
					parked = true
					cc.park(idleFrom.Add(c.ClientIdleTimeout))
				}
				return
			}
		}
	}
}

// await waits for the next request's first bytes; ok false when the
// connection ends instead, park true when it was parked (park.go). A new
// connection is served its first request even while shutting down (it
// was accepted, and its client is sending): closing it unanswered would
// fail a request that was never late. It waits request_start_timeout at
// most.
func (cc *clientConn) await(c *runtimeConfig, first bool) (ok, park bool) {
	p := cc.p
	cc.idle.Store(!first)
	wait := c.ClientIdleTimeout
	if p.conns.closing() && !first {
		// Stopping: an idle connection waits for its client's next
		// request only for shutdown_idle_grace (it is answered with
		// Connection: close), never closed under a client sending.
		left := p.conns.graceLeft(time.Now())
		if left <= 0 {
			return false, false
		}
		wait = min(wait, left)
	}
	if first {
		// A new connection says something soon or goes: idle sockets
		// opened to hold slots are not kept for minutes.
		wait = min(wait, c.RequestStartTimeout)
	}
	if cc.refusal {
		wait = min(wait, refusalWait)
	}
	now := time.Now()
	parkable := false
	if !first {
		wait, parkable = cc.idleWait(wait)
	}
	cc.dl.readIn(now, wait)
	err := cc.r.Fill()
	cc.idle.Store(false)
	if err != nil && parkable && isTimeout(err) && cc.parkable() {
		cc.park(now.Add(c.ClientIdleTimeout))
		return false, true
	}
	return err == nil, false
}

// refuse answers a request head that could not be read: 408 for one too
// slow, 431 for one too large, 400 for a malformed one. A client that
// simply closed, or reset, gets nothing.
func (cc *clientConn) refuse(start time.Time, err error) (answered bool) {
	tx := &cc.tx
	g := cc.p.acquire()
	defer g.release()
	tx.begin(g, start, nil)
	c := tx.rq.gen.cfg
	var e *Error
	switch {
	case isTimeout(err):
		e = errorf(408, CodeRequestTimeout, "", "the request head did not arrive within request_timeout (%s)", c.RequestTimeout)
	case err == h1.ErrHeadTooLarge:
		e = errorf(431, CodeBadRequest, "", "request head larger than max_header_size (%d bytes)", c.maxHeader)
	case err == io.EOF || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET):
		return false
	default:
		var he h1.Error
		if !errors.As(err, &he) {
			return false // a read error: the client is gone
		}
		e = errorf(h1.Status(err), CodeBadRequest, "", "%v", err)
	}
	e.Close = true
	tx.fail(e)
	tx.finish()
	return !cc.w.gone
}

// refusalWait is how long a connection from a source outside [proxy]
// allow may take to send its request before it is closed unanswered.
const refusalWait = 2 * time.Second

// clientSide is the client connection as an attempt and the cache see
// it while they wait on a next hop: interim answers go to it, and it is
// watched, so that a client that leaves frees everything at once.
type clientSide interface {
	interim(head []byte) error
	watch(up net.Conn) *watcher
	// quiet: no next request is buffered, so the end of an answer may
	// wait to go out with the wait for it (clientWriter.flushAndWait).
	quiet() bool
}

func (cc *clientConn) interim(head []byte) error { return cc.w.interim(head) }

func (cc *clientConn) quiet() bool { return cc.r.Buffered() == 0 && cc.rio.raw != nil }

// watcher reads the client connection while peerd waits on a next hop, so
// that a client that leaves is noticed at once. Bytes it reads (a client
// that talks first, or pipelines) stay buffered for later.
type watcher struct {
	cc   *clientConn
	done chan struct{}
	gone atomic.Bool   // the client closed or broke the connection
	err  error         // how (set before left is closed)
	left chan struct{} // closed when gone is set
}

// watch starts watching the client; when it leaves, up (if any) is
// closed, which ends any wait on it, and left is closed.
func (cc *clientConn) watch(up net.Conn) *watcher {
	w := &watcher{cc: cc, done: make(chan struct{}), left: make(chan struct{})}
	cc.dl.setRead(time.Time{})
	go func() {
		defer close(w.done)
		if err := cc.r.Fill(); err != nil && !isTimeout(err) {
			w.err = err
			w.gone.Store(true)
			close(w.left)
			if up != nil {
				up.Close()
			}
		}
	}()
	return w
}

// stop ends the watch, waits for it, and reports whether the client left
// (the client writer is told).
func (w *watcher) stop() bool {
	w.cc.dl.setRead(time.Unix(1, 0))
	<-w.done
	w.cc.dl.setRead(time.Time{})
	if w.gone.Load() {
		w.cc.w.readFailed(w.err)
	}
	return w.gone.Load()
}

// maxRefusing bounds the connections from sources outside [proxy] allow
// that are being answered 403 at once; past it they are closed unanswered.
const maxRefusing = 64

// remoteAddr is a connection's client address.
func remoteAddr(nc net.Conn) (netip.Addr, bool) {
	if ta, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		a, ok := netip.AddrFromSlice(ta.IP)
		return a.Unmap(), ok
	}
	ap, err := netip.ParseAddrPort(nc.RemoteAddr().String())
	return ap.Addr().Unmap(), err == nil
}

// accept admits a new client connection. A source outside [proxy] allow
// is refused before it is counted against max_connections or the per
// source cap: it gets its 403 from a small bounded set of goroutines, or
// a close when those are busy, so refused addresses can never use up the
// slots of allowed clients.
func (p *Proxy) accept(nc net.Conn) {
	c := p.config()
	remote, ok := remoteAddr(nc)
	if !ok || !c.allowed(remote) {
		if p.conns.refusing.Add(1) > maxRefusing {
			p.conns.refusing.Add(-1)
			p.metrics.connRefused()
			nc.Close()
			return
		}
		cc := newClientConn(p, nc)
		cc.refusal = true
		go cc.serve()
		return
	}
	if !p.conns.admit(c.MaxConnections) {
		p.metrics.connRefused()
		nc.Close()
		return
	}
	if !p.conns.admitSource(remote, c.MaxConnectionsPerSource) {
		p.conns.release()
		p.metrics.connRefused()
		nc.Close()
		return
	}
	cc := newClientConn(p, nc)
	cc.counted = true
	go cc.serve()
}

// begin starts a transaction for a request head (nil when the head could
// not be read) under generation g. head is copied: the connection's
// buffer moves on.
func (tx *txn) begin(g *generation, start time.Time, head []byte) {
	tx.rq.reset(g, &tx.cc.from, start)
	tx.rq.head = append(tx.rq.head, head...)
	tx.w.begin(g.cfg.WriteTimeout)
	tx.reply = reply{}
	tx.cl.reset()
	tx.ctype, tx.target, tx.out, tx.logBuf = tx.ctype[:0], tx.target[:0], tx.out[:0], tx.logBuf[:0]
	tx.icpTimedOut = false
}
