// Package blackhole makes a loopback address drop TCP SYNs, the way a
// vanished host does: a listener with a backlog of zero whose accept queue
// is filled and never drained. Connects to it neither succeed nor get
// refused; they time out. Used by end-to-end tests and the benchmark.
package blackhole

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// ErrNotFull means the kernel kept accepting connections, so the address
// could not be black-holed on this machine.
var ErrNotFull = errors.New("blackhole: accept queue never filled")

// At black-holes addr (an IPv4 ip:port, usually one just freed). The
// returned func releases it; it is safe to call more than once.
func At(addr string) (release func(), err error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return nil, fmt.Errorf("blackhole: %q is not an IPv4 ip:port", addr)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil, fmt.Errorf("blackhole: socket: %w", err)
	}
	var conns []net.Conn
	var once sync.Once
	release = func() {
		once.Do(func() {
			syscall.Close(fd)
			for _, c := range conns {
				c.Close()
			}
		})
	}
	syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}); err != nil {
		release()
		return nil, fmt.Errorf("blackhole: bind %s: %w", addr, err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		release()
		return nil, fmt.Errorf("blackhole: listen: %w", err)
	}
	// A backlog of 0 holds one connection; fill it and never accept.
	for i := 0; i < 3; i++ {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break
		}
		conns = append(conns, c)
	}
	if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
		c.Close()
		release()
		return nil, ErrNotFull
	}
	return release, nil
}
