package forwarding

// This file holds a tunnel's relay tools: the client writer's hello
// (after which it keeps no buffer), one read's worth copied through a
// pooled buffer, and the wait for a socket to be readable that holds
// nothing meanwhile. The tunnel's directions that use them are in
// tunnelrun.go.

import (
	"bufio"
	"errors"
	"io"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// tunnelHello answers the client with hello (a final head of status);
// from here the client connection is written raw, and the writer keeps
// no buffer.
func (w *clientWriter) tunnelHello(status int, hello []byte) error {
	if err := w.writeHead(status, hello); err != nil {
		return err
	}
	if err := w.flush(); err != nil {
		return err
	}
	w.buf.Reset(nil)
	w.buf = shedWriter(&w.dw)
	return nil
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

var errClientGone = errors.New("the client went away")
