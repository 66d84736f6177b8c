package forwarding

// This file holds writing a message and waiting for the peer's next bytes
// in one poll cycle.

import (
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/peerd/peerd/internal/h1"
)

// rawIO writes a message and waits for the peer's next bytes in one poll
// cycle. Written the usual way, the read that follows a request (or a
// response, on a keep-alive client connection) finds nothing yet, fails
// with EAGAIN and only then waits: a system call per exchange that does
// nothing. Here the write happens inside the read's poll loop
// (syscall.RawConn.Read), so the poller is armed before the message leaves
// and no wake-up can be missed, and the goroutine waits without that
// failed read.
type rawIO struct {
	raw syscall.RawConn // nil: not a socket; callers fall back
	r   *h1.Reader
	// idle, when set, is raised once the write is done: the connection
	// then only waits, and shutdown may close it.
	idle *atomic.Bool

	// One exchange's state; poll is its callback, made once so that an
	// exchange allocates nothing.
	out        []byte
	sent       int
	wrote      bool
	werr, rerr error
	poll       func(fd uintptr) bool
}

func newRawIO(nc net.Conn, r *h1.Reader, idle *atomic.Bool) rawIO {
	var raw syscall.RawConn
	if sc, ok := nc.(syscall.Conn); ok {
		raw, _ = sc.SyscallConn()
	}
	return rawIO{raw: raw, r: r, idle: idle}
}

// init binds the poll callback; the rawIO must not move afterwards.
func (x *rawIO) init() {
	if x.raw != nil {
		x.poll = x.pollOnce
	}
}

// sendAndWait writes out and then waits until the peer sends something
// (read into r), closes, or the read deadline passes. It returns how much
// was written; a write that would block stops early (sent < len(out)) and
// the caller writes the rest the usual way. werr is a failed write, rerr
// the outcome of the wait (nil: bytes arrived).
func (x *rawIO) sendAndWait(out []byte) (sent int, werr, rerr error) {
	x.out, x.sent, x.wrote, x.werr, x.rerr = out, 0, false, nil, nil
	if err := x.raw.Read(x.poll); err != nil && x.rerr == nil {
		x.rerr = err // a deadline, or the connection was closed
	}
	x.out = nil
	return x.sent, x.werr, x.rerr
}

func (x *rawIO) pollOnce(fd uintptr) bool {
	if !x.wrote {
		x.wrote = true
		for x.sent < len(x.out) {
			n, err := rawWrite(fd, x.out[x.sent:])
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				if err != syscall.EAGAIN {
					x.werr = err
				}
				return true
			}
			x.sent += n
		}
		if x.idle != nil {
			x.idle.Store(true)
		}
		return false // now wait for the peer
	}
	space := x.r.Space()
	if len(space) == 0 {
		return true // bytes are waiting in the buffer already
	}
	n, err := rawRead(fd, space)
	for err == syscall.EINTR {
		// Interrupted before reading: read again at once (bytes may be
		// waiting whose readiness was already reported).
		n, err = rawRead(fd, space)
	}
	if err == syscall.EAGAIN {
		return false
	}
	switch {
	case err != nil:
		x.rerr = err
	case n == 0:
		x.rerr = io.EOF
	default:
		x.r.Added(n)
	}
	return true
}

// rawRead and rawWrite are read(2) and write(2) on a non-blocking socket
// without telling the scheduler a system call is under way (RawSyscall):
// they never wait. syscall.Read and syscall.Write would; at moderate load,
// where the process goes idle between requests, the first such call after
// an idle spell wakes the runtime's monitor thread (sysmon) from its deep
// sleep, which then polls every 20 µs until all is idle again: two futex
// calls, a nanosleep or two and three context switches per request, a
// third of the CPU a request costs at 3,000 req/s.
func rawRead(fd uintptr, p []byte) (int, error) { return rawIO1(syscall.SYS_READ, fd, p) }

func rawWrite(fd uintptr, p []byte) (int, error) { return rawIO1(syscall.SYS_WRITE, fd, p) }

// rawIO1 is one read(2) or write(2) (trap) of p on fd.
func rawIO1(trap, fd uintptr, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, e := syscall.RawSyscall(trap, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// rawPeek is a non-blocking recv(2) with MSG_PEEK: what is waiting, left
// in place. It returns -1 with the error, as recv(2) does.
func rawPeek(fd uintptr, p []byte) (int, error) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)),
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}
