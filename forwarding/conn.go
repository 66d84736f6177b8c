package forwarding

// This file holds a client connection: its loop over requests, deadlines,
// and the refusal of heads that cannot be read.

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/peerd/peerd/internal/h1"
)

var errTooManyFiles = syscall.EMFILE

// clientConn is one client connection. Requests on it are handled one at
// a time, in order, so pipelined requests are answered in order; the
// buffers and the transaction record are reused from request to request.
type clientConn struct {
	p   *Proxy
	nc  net.Conn
	r   *h1.Reader
	w   *bufio.Writer
	dl  deadlines
	dw  deadlineWriter
	rio rawIO

	remote    netip.Addr
	remoteOK  bool
	remoteStr string
	// remotePort is the client's port (0: not known), for the access log.
	remotePort uint16
	// graced: stopping, the idle wait was cut to the grace's end
	// (connSet.closeIdle, under its lock).
	graced bool

	// counted: the connection holds a max_connections slot and one of its
	// source's (released when it ends). refusal: its source is outside
	// [proxy] allow; it is answered 403 once and closed.
	counted, refusal bool

	idle atomic.Bool // waiting for a request (Shutdown may close it)
	tx   txn
	memo requestMemo // the last request's counter
}

func newClientConn(p *Proxy, nc net.Conn) *clientConn {
	cc := &clientConn{p: p, nc: nc}
	cc.dl = deadlines{nc: nc}
	cc.r = h1.NewReader(nc, 4<<10)
	cc.rio = newRawIO(nc, cc.r, &cc.idle)
	cc.rio.init()
	cc.dw = deadlineWriter{dl: &cc.dl, rio: &cc.rio}
	cc.w = bufio.NewWriterSize(&cc.dw, 4<<10)
	if ap, err := netip.ParseAddrPort(nc.RemoteAddr().String()); err == nil {
		cc.remote, cc.remoteOK, cc.remotePort = ap.Addr().Unmap(), true, ap.Port()
		cc.remoteStr = cc.remote.String()
	} else {
		cc.remoteStr = nc.RemoteAddr().String()
	}
	cc.tx.cc = cc
	return cc
}

// deadlines caches the read and write deadlines in force on a connection,
// so that one is moved only when it would end too early or much too late:
// a timeout d ends a wait between d and 1.25 d after it began, and a steady
// stream of short requests re-arms no timer (each move is a runtime timer
// update, and they were a good part of a request's cost).
type deadlines struct {
	nc          net.Conn
	read, write time.Time // in force; zero: none
}

// readIn makes a read that starts now time out after t (to t + t/4).
func (d *deadlines) readIn(now time.Time, t time.Duration) {
	if lo := now.Add(t); d.read.Before(lo) || d.read.After(lo.Add(t/4)) {
		d.read = lo.Add(t / 4)
		d.nc.SetReadDeadline(d.read)
	}
}

// writeIn makes a write that starts now time out after t (to t + t/4).
func (d *deadlines) writeIn(now time.Time, t time.Duration) {
	if lo := now.Add(t); d.write.Before(lo) || d.write.After(lo.Add(t/4)) {
		d.write = lo.Add(t / 4)
		d.nc.SetWriteDeadline(d.write)
	}
}

// readBy makes a read that starts now end at or a little before at (to
// at - slack): a deadline in force in that window is kept. A read that
// ends early finds the time not yet come and waits again to at exactly;
// one that ends at at never waits past it. For the first-byte timeout,
// which would otherwise move the deadline (a runtime timer update) on
// every request a parent answers in time.
func (d *deadlines) readBy(now, at time.Time, slack time.Duration) {
	if !d.read.After(now) || d.read.After(at) || d.read.Before(at.Add(-slack)) {
		d.read = at
		d.nc.SetReadDeadline(at)
	}
}

// clearPassed drops the read and write deadlines if they passed by now.
func (d *deadlines) clearPassed(now time.Time) {
	if !d.read.IsZero() && !d.read.After(now) {
		d.setRead(time.Time{})
	}
	if !d.write.IsZero() && !d.write.After(now) {
		d.write = time.Time{}
		d.nc.SetWriteDeadline(time.Time{})
	}
}

// setRead sets an exact read deadline (zero: none; in the past: now).
func (d *deadlines) setRead(at time.Time) {
	d.read = at
	d.nc.SetReadDeadline(at)
}

// deadlineWriter applies write_timeout to writes to the client: a client
// that accepts nothing for that long is cut. In wait mode (see
// clientConn.flushAndWait) a write also waits for the next request.
type deadlineWriter struct {
	dl      *deadlines
	timeout time.Duration
	rio     *rawIO
	// wait mode: the client_idle_timeout, and the wait's outcome.
	wait    bool
	idle    time.Duration
	waited  bool
	waitErr error
	// sent counts the bytes written to the client, for the access log.
	sent int64
}

func (d *deadlineWriter) Write(b []byte) (int, error) {
	now := time.Now()
	if d.wait && d.rio.raw != nil {
		d.dl.readIn(now, d.idle)
		n, werr, rerr := d.rio.sendAndWait(b)
		d.sent += int64(n)
		if werr != nil {
			return n, werr
		}
		if n == len(b) {
			d.waited, d.waitErr = true, rerr
			return n, nil
		}
		b = b[n:] // the socket was full: the rest the usual way
		d.dl.writeIn(now, d.timeout)
		m, err := d.dl.nc.Write(b)
		d.sent += int64(m)
		return n + m, err
	}
	d.dl.writeIn(now, d.timeout)
	n, err := d.dl.nc.Write(b)
	d.sent += int64(n)
	return n, err
}

// handed counts the bytes given to the client writer so far: those
// written and those still buffered.
func (cc *clientConn) handed() int64 { return cc.dw.sent + int64(cc.w.Buffered()) }

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// serve handles requests until the connection closes or must close.
func (cc *clientConn) serve() {
	p := cc.p
	linger := false
	defer func() {
		p.conns.remove(cc)
		if linger {
			lingerClose(cc.nc)
		} else {
			cc.nc.Close()
		}
		switch {
		case cc.counted:
			p.conns.release()
			p.conns.releaseSource(cc.remote)
		case cc.refusal:
			p.conns.refusing.Add(-1)
		}
	}()
	if !p.conns.add(cc) {
		return
	}
	for first := true; ; first = false {
		c := p.config()
		cc.dw.timeout = c.WriteTimeout
		if cc.r.Buffered() == 0 {
			// A new connection is served its first request even while
			// shutting down (it was accepted, and its client is sending):
			// closing it unanswered would fail a request that was never
			// late. It waits request_start_timeout at most.
			cc.idle.Store(!first)
			wait := c.ClientIdleTimeout
			if p.conns.closing() && !first {
				// Stopping: an idle connection waits for its client's next
				// request only for shutdown_idle_grace (it is answered with
				// Connection: close), never closed under a client sending.
				left := p.conns.graceLeft(time.Now())
				if left <= 0 {
					return
				}
				wait = min(wait, left)
			}
			if first {
				// A new connection says something soon or goes: idle
				// sockets opened to hold slots are not kept for minutes.
				wait = min(wait, c.RequestStartTimeout)
			}
			if cc.refusal {
				wait = min(wait, refusalWait)
			}
			cc.dl.readIn(time.Now(), wait)
			err := cc.r.Fill()
			cc.idle.Store(false)
			if err != nil {
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
			linger = cc.refuse(c, start, err)
			return
		}
		tx := &cc.tx
		tx.begin(c, start, head)
		cc.r.Release(head)
		out := tx.serve()
		if cc.refusal {
			out = closeConn
		}
		// An answer peerd made itself on a connection it then closes (a
		// refusal, a bad request) may leave unread request bytes behind:
		// closing at once would reset the connection before the client
		// read the answer.
		linger = out == closeConn && tx.code != "" && !tx.clientGone
		switch out {
		case keepOpen:
			if p.conns.closing() {
				// An answer that began before the stop kept the
				// connection: its next request comes within the grace.
				if cc.w.Flush() != nil {
					return
				}
				continue
			}
			if tx.flushLater && !cc.flushAndWait(c) {
				return
			}
		default:
			return
		}
	}
}

// flushAndWait sends the rest of an answer and waits for the next
// request in one poll cycle (see rawIO). It reports whether the connection
// goes on: false when the client went away or stayed idle too long.
func (cc *clientConn) flushAndWait(c *runtimeConfig) bool {
	cc.dw.wait, cc.dw.idle, cc.dw.waited, cc.dw.waitErr = true, c.ClientIdleTimeout, false, nil
	err := cc.w.Flush()
	cc.dw.wait = false
	cc.idle.Store(false)
	if err != nil {
		return false
	}
	return !cc.dw.waited || cc.dw.waitErr == nil
}

// refuse answers a request head that could not be read: 408 for one too
// slow, 431 for one too large, 400 for a malformed one. A client that
// simply closed, or reset, gets nothing.
func (cc *clientConn) refuse(c *runtimeConfig, start time.Time, err error) (answered bool) {
	tx := &cc.tx
	tx.begin(c, start, nil)
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
	return !tx.clientGone
}

// lingerClose closes a connection the way net/http does after an error
// answer: it stops sending, then reads and drops what the client still
// sends, for a short while, so that the kernel does not answer those
// bytes with a reset that destroys the answer before it is read.
func lingerClose(nc net.Conn) {
	if cw, ok := nc.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		nc.SetReadDeadline(time.Now().Add(lingerFor))
		io.CopyN(io.Discard, nc, lingerMax)
	}
	nc.Close()
}

// refusalWait is how long a connection from a source outside [proxy]
// allow may take to send its request before it is closed unanswered.
const refusalWait = 2 * time.Second

// lingerFor and lingerMax bound a lingering close.
const (
	lingerFor = 500 * time.Millisecond
	lingerMax = 256 << 10
)
