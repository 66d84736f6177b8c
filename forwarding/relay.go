package forwarding

// This file holds a tunnel's relay: once the client writer has answered
// a CONNECT (or an upgrade), the bytes copied both ways between the
// client and the next hop, half-closes passed on, until both sides are
// done or idle.

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
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
// Between two plain TCP connections the kernel moves the bytes (splice(2),
// through net.TCPConn.ReadFrom) and they never enter user space. A side
// that sent EOF is half-closed on the other; the tunnel ends when
// neither direction carried a byte for idle (each direction waits in
// rounds of idle/2 and reads last, the other's latest progress).
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
	var buf []byte
	if dt == nil || st == nil {
		bufp := copyBuffers.Get().(*[]byte)
		defer copyBuffers.Put(bufp)
		buf = *bufp
	}
	for {
		now := time.Now()
		src.SetReadDeadline(now.Add(round))
		dst.SetWriteDeadline(now.Add(idle))
		var m int64
		var err error
		if dt != nil && st != nil {
			m, err = dt.ReadFrom(st) // splice(2); returns at EOF, an error or the deadline
		} else {
			var k int
			k, err = src.Read(buf)
			if k > 0 {
				var werr error
				k, werr = dst.Write(buf[:k])
				if werr != nil && err == nil {
					err = werr
				}
			}
			m = int64(k)
		}
		n += m
		if m > 0 {
			last.Store(time.Now().UnixNano())
		}
		switch {
		case err == nil && dt != nil && st != nil:
			closeWrite(dst) // ReadFrom returns nil at src's EOF
			return n
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

// closeWrite half-closes c so the other side sees EOF but can still
// answer; a connection that cannot half-close is closed.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		return
	}
	c.Close()
}

var errClientGone = errors.New("the client went away")
