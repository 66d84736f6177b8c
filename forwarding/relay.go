package forwarding

// This file holds a tunnel's relay: once the client writer has answered
// a CONNECT (or an upgrade), the bytes copied both ways between the
// client and the next hop, half-closes passed on, until both sides are
// done or idle. An idle tunnel holds its two sockets and nothing else:
// no buffer, no splice pipe.

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// tunnel answers the client with hello (a final head of status), then
// copies bytes both ways between the client and up until both sides are
// done or idle for idle, passing half-closes on. fromClient and fromUp
// are bytes each side sent already (read into buffers). It returns the
// bytes up sent the client and the bytes the client sent up.
func (w *clientWriter) tunnel(status int, hello []byte, up net.Conn, fromClient, fromUp []byte, idle time.Duration) (in, out int64, err error) {
	if err := w.writeHead(status, hello); err != nil {
		return 0, 0, err
	}
	if err := w.flush(); err != nil {
		return 0, 0, err
	}
	w.buf.Reset(nil) // written raw from here: no buffer is kept
	w.buf = shedWriter(&w.dw)
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		in = pipe(w.nc, up, fromUp, idle, &last)
	}()
	out = pipe(up, w.nc, fromClient, idle, &last)
	wg.Wait()
	return in, out, nil
}

// pipe copies src to dst, after pending, and returns the bytes written.
// An idle direction holds nothing of its own: it waits for src to be
// readable with no buffer and no pipe (an idle tunnel costs its two
// sockets, as in Squid; a splice(2) waiting for bytes held a pipe, two
// descriptors, per direction). What came is then moved at once: in the
// kernel (splice(2), through net.TCPConn.ReadFrom of exactly the bytes
// queued) when there is a lot of it between two plain TCP connections,
// else through a pooled buffer. A side that sent EOF is half-closed on
// the other; the tunnel ends when neither direction carried a byte for
// idle (each direction waits in rounds of idle/2 and reads last, the
// other's latest progress).
func pipe(dst, src net.Conn, pending []byte, idle time.Duration, last *atomic.Int64) int64 {
	var n int64
	if len(pending) > 0 {
		m, err := dst.Write(pending)
		n += int64(m)
		if err != nil {
			src.Close()
			dst.Close()
			return n
		}
		last.Store(time.Now().UnixNano())
	}
	round := max(idle/2, time.Millisecond)
	dt, _ := dst.(*net.TCPConn)
	st, _ := src.(*net.TCPConn)
	var w waiter
	if sc, ok := src.(syscall.Conn); ok {
		w.raw, _ = sc.SyscallConn()
	}
	for {
		now := time.Now()
		src.SetReadDeadline(now.Add(round))
		queued, err := w.wait()
		var m int64
		if err == nil {
			dst.SetWriteDeadline(now.Add(idle))
			if dt != nil && st != nil && queued >= spliceTunnelMin {
				m, err = dt.ReadFrom(io.LimitReader(st, int64(queued)))
				if err == nil && m == 0 {
					err = io.EOF
				}
			} else {
				m, err = copyOnce(dst, src)
			}
		}
		n += m
		if m > 0 {
			last.Store(time.Now().UnixNano())
		}
		switch {
		case err == nil:
			continue
		case isTimeout(err) && time.Since(now) < idle && time.Since(time.Unix(0, last.Load())) < idle:
			// The read's round ended (a write that waited idle is a
			// client or next hop that stopped reading: the end), and
			// this direction or the other is busy.
			continue
		case errors.Is(err, io.EOF):
			closeWrite(dst)
			return n
		}
		src.Close()
		dst.Close()
		return n
	}
}

// spliceTunnelMin is the least a tunnel's direction has queued for it to
// be moved by splice(2) rather than through a buffer.
const spliceTunnelMin = 16 << 10

// copyOnce moves one read's worth of src to dst through a pooled buffer,
// taken only now that bytes are there.
func copyOnce(dst, src net.Conn) (int64, error) {
	bufp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bufp)
	k, err := src.Read(*bufp)
	if k > 0 {
		var werr error
		k, werr = dst.Write((*bufp)[:k])
		if werr != nil && err == nil {
			err = werr
		}
	}
	return int64(k), err
}

// waiter waits for a socket to be readable without reading it (nothing
// but the socket is held meanwhile), and says how many bytes are queued.
type waiter struct {
	raw    syscall.RawConn // nil: not a socket (a TLS connection): the read waits itself
	peek   [1]byte
	queued int
	err    error
	poll   func(fd uintptr) bool
}

// wait returns once src is readable, or at its read deadline (the
// deadline's error), with the bytes queued (0 at EOF, or when that cannot
// be told).
func (w *waiter) wait() (int, error) {
	if w.raw == nil {
		return 0, nil
	}
	if w.poll == nil {
		w.poll = w.ready
	}
	w.queued, w.err = 0, nil
	if err := w.raw.Read(w.poll); err != nil {
		return 0, err
	}
	return w.queued, w.err
}

// ready is the raw read's callback: false (wait) while nothing is
// queued; true at data, EOF or an error, which a read then returns.
func (w *waiter) ready(fd uintptr) bool {
	n, _, err := syscall.Recvfrom(int(fd), w.peek[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	if err == syscall.EAGAIN || err == syscall.EINTR {
		return false
	}
	if n > 0 {
		if q, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ); err == nil {
			w.queued = q
		}
	}
	return true
}

// shedWriter is a client writer's buffer for a connection that only
// relays now (a tunnel): the least bufio allows.
func shedWriter(w io.Writer) *bufio.Writer { return bufio.NewWriterSize(w, 16) }

// closeWrite half-closes c so the other side sees EOF but can still
// answer; a connection that cannot half-close is closed.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		return
	}
	c.Close()
}

var errClientGone = errors.New("the client went away")
