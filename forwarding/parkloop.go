package forwarding

// This file holds the park loop: one epoll(7) instance of peerd's own
// that waits for the next request of every parked connection (park.go),
// so that a parked connection costs its socket and a small record, and no
// goroutine: a goroutine waiting on each held its stack (2 KiB, the least
// Go gives one) and the runtime's record of it, more than half of what an
// idle keep-alive connection cost. Each parked socket is in the set once,
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
// waits on a goroutine of its own, as before.

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// parkLoop is the epoll set of parked connections and its goroutine.
type parkLoop struct {
	mu     sync.Mutex
	made   bool               // the set exists and its goroutine runs
	fd     int                // the epoll instance
	by     map[uint32]*parked // by token: the connections in the set
	next   uint32
	broken bool      // epoll_wait failed: parking goes back to goroutines
	warned time.Time // the last warning that the set could not be made
}

// join puts pk in the loop's set, making the set on first use (or
// after it could not be, as when descriptors ran out), and arms pk's
// timer; false when it cannot (pk then waits on a goroutine).
func (l *parkLoop) join(p *Proxy, pk *parked) bool {
	sfd := -1
	if pk.w.raw == nil || pk.w.raw.Control(func(fd uintptr) { sfd = int(fd) }) != nil || sfd < 0 {
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
		l.made, l.fd, l.by = true, fd, map[uint32]*parked{}
		go l.run(p)
	}
	if !l.made || l.broken {
		return false
	}
	for l.next++; l.by[l.next] != nil || l.next == 0; l.next++ {
	}
	pk.token, pk.fd = l.next, sfd
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: int32(pk.token)}
	if unix.EpollCtl(l.fd, unix.EPOLL_CTL_ADD, sfd, &ev) != nil {
		return false
	}
	l.by[pk.token] = pk
	pk.timer = time.AfterFunc(time.Until(time.Unix(0, pk.deadline.Load())), func() {
		if l.take(pk) {
			pk.finish(p)
		}
	})
	return true
}

// take takes pk out of the set: true for the one caller that did (it
// owns the connection now), false when it was taken already.
func (l *parkLoop) take(pk *parked) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.takeLocked(pk.token) != nil
}

func (l *parkLoop) takeLocked(token uint32) *parked {
	pk := l.by[token]
	if pk == nil {
		return nil
	}
	delete(l.by, token)
	unix.EpollCtl(l.fd, unix.EPOLL_CTL_DEL, pk.fd, nil)
	pk.timer.Stop()
	return pk
}

// cut moves the end of pk's wait to its deadline (a stop cut it short):
// its timer in the set, else its read deadline (pk waits on a goroutine,
// or will: join reads the deadline after this). A parked connection is
// never closed by anyone but the one that took it.
func (l *parkLoop) cut(pk *parked) {
	l.mu.Lock()
	defer l.mu.Unlock()
	at := time.Unix(0, pk.deadline.Load())
	if pk.token != 0 && l.by[pk.token] == pk {
		pk.timer.Reset(time.Until(at))
		return
	}
	pk.nc.SetReadDeadline(at)
}

// run hands each parked connection that became readable to a goroutine
// that serves it.
func (l *parkLoop) run(p *Proxy) {
	var evs [128]unix.EpollEvent
	for {
		n, err := unix.EpollWait(l.fd, evs[:], -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			// The sockets in the set still end at their timers; new ones
			// wait on goroutines of their own.
			p.log.WithError(err).Error("idle connections: epoll_wait failed; parked connections now wait on goroutines")
			l.mu.Lock()
			l.broken = true
			l.mu.Unlock()
			return
		}
		l.mu.Lock()
		for _, ev := range evs[:n] {
			if pk := l.takeLocked(uint32(ev.Fd)); pk != nil {
				go pk.resume(p)
			}
		}
		l.mu.Unlock()
	}
}
