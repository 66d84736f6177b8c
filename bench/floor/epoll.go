//go:build linux

package main

// This file holds the event-loop floor: one locked thread that reaps every
// ready socket per epoll_wait, as ATS's and Squid's loops do, with no
// goroutine parked or woken per request.

import (
	"bytes"
	"fmt"
	"net"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// side is one socket of a client's pair.
type side struct {
	fd     int
	client bool
	buf    []byte // bytes read and not yet relayed
	other  *side
}

func epoll(parent *net.TCPAddr) error {
	runtime.LockOSThread()
	lfd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if err := syscall.Bind(lfd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return err
	}
	if err := syscall.Listen(lfd, 1024); err != nil {
		return err
	}
	sa, err := syscall.Getsockname(lfd)
	if err != nil {
		return err
	}
	fmt.Printf("127.0.0.1:%d\n", sa.(*syscall.SockaddrInet4).Port)
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	if err := watch(ep, lfd); err != nil {
		return err
	}
	to := &syscall.SockaddrInet4{Port: parent.Port}
	copy(to.Addr[:], parent.IP.To4())
	sides := map[int]*side{}
	drop := func(s *side) {
		for _, x := range []*side{s, s.other} {
			syscall.Close(x.fd)
			delete(sides, x.fd)
		}
	}
	events := make([]syscall.EpollEvent, 256)
	in := make([]byte, 64<<10)
	for {
		n, err := syscall.EpollWait(ep, events, -1)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			if fd == lfd {
				if err := accept(ep, lfd, to, sides); err != nil {
					return err
				}
				continue
			}
			s := sides[fd]
			if s == nil {
				continue // dropped earlier in this batch
			}
			m, err := syscall.Read(fd, in)
			if err == syscall.EAGAIN {
				continue
			}
			if err != nil || m == 0 {
				drop(s)
				continue
			}
			s.buf = append(s.buf, in[:m]...)
			if !s.relay() {
				drop(s)
			}
		}
	}
}

// accept takes every waiting client and dials its upstream connection.
func accept(ep, lfd int, to *syscall.SockaddrInet4, sides map[int]*side) error {
	for {
		cfd, _, err := syscall.Accept4(lfd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		switch err {
		case nil:
		case syscall.EAGAIN:
			return nil
		case syscall.EINTR, syscall.ECONNABORTED:
			continue // a client that reset before it was taken
		default:
			return err
		}
		ufd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err == nil {
			err = syscall.Connect(ufd, to) // blocking, to loopback
		}
		if err == nil {
			err = syscall.SetNonblock(ufd, true)
		}
		if err != nil {
			syscall.Close(cfd)
			syscall.Close(ufd)
			continue
		}
		for _, fd := range []int{cfd, ufd} {
			syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
		}
		c := &side{fd: cfd, client: true}
		u := &side{fd: ufd, other: c}
		c.other = u
		sides[cfd], sides[ufd] = c, u
		if err := watch(ep, cfd); err != nil {
			return err
		}
		if err := watch(ep, ufd); err != nil {
			return err
		}
	}
}

func watch(ep, fd int) error {
	return syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)})
}

// relay sends on what s has whole: a request head to the parent, an answer
// to the client. It reports false when the pair must be closed.
func (s *side) relay() bool {
	n := 0
	if s.client {
		if h := bytes.Index(s.buf, headEnd); h >= 0 {
			n = h + len(headEnd)
		}
	} else {
		n = answerLen(s.buf)
	}
	if n < 0 {
		return false
	}
	if n == 0 || len(s.buf) < n {
		return true
	}
	if !writeAll(s.other.fd, s.buf[:n]) {
		return false
	}
	s.buf = append(s.buf[:0], s.buf[n:]...)
	return true
}

// writeAll writes b, waiting in poll(2) on the rare short write (the
// bench's answers fit a loopback socket's buffer).
func writeAll(fd int, b []byte) bool {
	for len(b) > 0 {
		m, err := syscall.Write(fd, b)
		if err == syscall.EAGAIN {
			unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}, 1000)
			continue
		}
		if err != nil || m <= 0 {
			return false
		}
		b = b[m:]
	}
	return true
}
