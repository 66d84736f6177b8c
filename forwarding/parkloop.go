package forwarding

// This file holds the park loop: one epoll(7) instance of peerd's own
// that waits for the next request of every parked connection (park.go)
// and for the next bytes of every idle tunnel direction (tunnelrun.go),
// so that each costs its socket and a small record, and no goroutine: a
// goroutine waiting on each held its stack (2 KiB, the least Go gives
// one) and the runtime's record of it, more than half of what an idle
// keep-alive connection cost. Each parked socket is in the set once,
// one-shot, under a token of its own; the one goroutine of the loop hands
// a socket that became readable (a request, or its client's close) to a
// new goroutine that serves it. A runtime timer (no goroutine) ends the
// wait at client_idle_timeout, or at the end of a stop's grace. Whoever
// takes a connection out of the set (its readiness, its timer, a stop)
// owns it; the others find it gone.
//
// The socket stays in the runtime's own poller too (an fd may be in
// several epoll sets): that one only notes its readiness while nobody
// reads, and the goroutine that serves it next reads as usual. When the
// loop cannot be made (or a socket cannot join it), a parked connection
// or an idle direction waits on a goroutine of its own.

import (
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// parkLoop is the epoll set of waiting sockets and its goroutine.
type parkLoop struct {
	mu     sync.Mutex
	made   bool                // the set exists and its goroutine runs
	fd     int                 // the epoll instance
	by     map[uint32]*sleeper // by token: the sockets in the set
	next   uint32
	broken bool      // epoll_wait failed: waits go back to goroutines
	warned time.Time // the last warning that the set could not be made
}

// sleeper is a socket's place in the set: its token there (0: never in
// it), its descriptor, and the timer that ends its wait.
type sleeper struct {
	token uint32
	fd    int
	timer *time.Timer
	of    waker
}

// waker is what waits in the set: a parked connection (park.go) or a
// tunnel's direction (tunnelrun.go).
type waker interface {
	wake()               // its socket is readable (on a goroutine of its own)
	expire()             // its wait ended (taken out of the set by its timer)
	left() time.Duration // how long its wait has left
}

// join puts s's socket (raw) in the set, making the set on first use
// (or after it could not be, as when descriptors ran out), and arms its
// timer; false when it cannot (the socket then waits on a goroutine).
func (l *parkLoop) join(p *Proxy, s *sleeper, raw syscall.RawConn) bool {
	sfd := -1
	if raw == nil || raw.Control(func(fd uintptr) { sfd = int(fd) }) != nil || sfd < 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.made && !l.broken {
		fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			if now := time.Now(); now.Sub(l.warned) >= time.Minute {
				l.warned = now
				p.log.WithError(err).Warn("idle connections wait on a goroutine each: their epoll set cannot be made")
			}
			return false
		}
		l.made, l.fd, l.by = true, fd, map[uint32]*sleeper{}
		go l.run(p)
	}
	if !l.made || l.broken {
		return false
	}
	for l.next++; l.by[l.next] != nil || l.next == 0; l.next++ {
	}
	s.token, s.fd = l.next, sfd
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: int32(s.token)}
	if unix.EpollCtl(l.fd, unix.EPOLL_CTL_ADD, sfd, &ev) != nil {
		return false
	}
	l.by[s.token] = s
	s.timer = time.AfterFunc(s.of.left(), func() { l.expired(s) })
	return true
}

// take takes s out of the set: true for the one caller that did (it
// owns the socket now), false when it was not there.
func (l *parkLoop) take(s *sleeper) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return s.token != 0 && l.by[s.token] == s && l.takeLocked(s.token) != nil
}

func (l *parkLoop) takeLocked(token uint32) *sleeper {
	s := l.by[token]
	if s == nil {
		return nil
	}
	delete(l.by, token)
	unix.EpollCtl(l.fd, unix.EPOLL_CTL_DEL, s.fd, nil)
	s.timer.Stop()
	return s
}

// expired is s's timer: its wait ends unless it has time left (a tunnel
// whose other direction moved bytes meanwhile).
func (l *parkLoop) expired(s *sleeper) {
	l.mu.Lock()
	if s.token == 0 || l.by[s.token] != s {
		l.mu.Unlock()
		return
	}
	if d := s.of.left(); d > 0 {
		s.timer.Reset(d)
		l.mu.Unlock()
		return
	}
	l.takeLocked(s.token)
	l.mu.Unlock()
	s.of.expire()
}

// rearm moves s's timer to what its wait has left (a stop cut it
// short); false when s is not in the set.
func (l *parkLoop) rearm(s *sleeper) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.token == 0 || l.by[s.token] != s {
		return false
	}
	s.timer.Reset(s.of.left())
	return true
}

// run hands each socket that became readable to a goroutine of its own.
func (l *parkLoop) run(p *Proxy) {
	var evs [128]unix.EpollEvent
	for {
		n, err := unix.EpollWait(l.fd, evs[:], -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			// The sockets in the set still end at their timers; new
			// waits are on goroutines of their own.
			p.log.WithError(err).Error("idle connections: epoll_wait failed; idle sockets now wait on goroutines")
			l.mu.Lock()
			l.broken = true
			l.mu.Unlock()
			return
		}
		l.mu.Lock()
		for _, ev := range evs[:n] {
			if s := l.takeLocked(uint32(ev.Fd)); s != nil {
				go s.of.wake()
			}
		}
		l.mu.Unlock()
	}
}
