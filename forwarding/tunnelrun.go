package forwarding

// This file holds a running tunnel: its two directions, each copying one
// side's bytes to the other, and its end. A direction with nothing to
// copy for parkAfter leaves its goroutine and waits in the park loop's
// epoll set (parkloop.go), as a parked client connection does; bytes
// bring it back on a new goroutine. An idle tunnel so holds its two
// sockets and its records, and no goroutine, stack, buffer or pipe.
//
// Who closes what: a socket in the set is closed only by whoever took it
// out (a descriptor's number is reused once closed). So a tunnel's
// sockets are closed by end, which first takes both its directions out
// of the set (and no direction joins it once the tunnel ends), or by
// done once its three shares (its directions and the goroutine that
// opened it) are done and nothing of it can be in the set; then onEnd.

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// tunnelRun is one tunnel's relay.
type tunnelRun struct {
	p          *Proxy
	client, up net.Conn
	idle       time.Duration // read_timeout: the tunnel ends when neither direction moved a byte for it
	last       atomic.Int64  // when either direction last moved a byte (Unix ns)
	dirs       [2]direction  // client to up, up to client
	onEnd      func(in, out int64)

	mu     sync.Mutex
	ended  bool // its sockets are being closed: no direction joins the set
	shares int  // the directions and the opener not done yet
}

// direction copies src to dst.
type direction struct {
	t        *tunnelRun
	dst, src net.Conn
	pending  []byte // what src sent before the tunnel began
	n        int64  // bytes written to dst
	w        waiter
	sl       sleeper
	noPark   bool // src cannot wait in the set: this direction waits on its goroutine
}

// newTunnelRun makes the tunnel between client and up; fromClient and
// fromUp are what each sent already. onEnd gets the bytes up sent the
// client and the bytes the client sent up.
func newTunnelRun(p *Proxy, client, up net.Conn, fromClient, fromUp []byte, idle time.Duration, onEnd func(in, out int64)) *tunnelRun {
	t := &tunnelRun{p: p, client: client, up: up, idle: idle, onEnd: onEnd, shares: 3}
	t.last.Store(time.Now().UnixNano())
	t.dirs[0] = direction{t: t, dst: up, src: client, pending: fromClient}
	t.dirs[1] = direction{t: t, dst: client, src: up, pending: fromUp}
	for i := range t.dirs {
		d := &t.dirs[i]
		d.sl.of = d
		if sc, ok := d.src.(syscall.Conn); ok {
			d.w.raw, _ = sc.SyscallConn()
		}
	}
	return t
}

// start runs both directions, each on a goroutine of its own.
func (t *tunnelRun) start() {
	go t.dirs[0].run()
	go t.dirs[1].run()
}

// done gives up one share (a direction's, or the opener's: the goroutine
// that began the tunnel); once all three are done, the sockets are closed
// and onEnd runs.
func (t *tunnelRun) done() {
	t.mu.Lock()
	t.shares--
	last := t.shares == 0
	t.mu.Unlock()
	if last {
		t.client.Close()
		t.up.Close()
		t.onEnd(t.dirs[1].n, t.dirs[0].n)
	}
}

// end closes the tunnel's sockets, after taking its directions out of
// the set; a direction taken out is done, one on a goroutine finds its
// sockets closed. (Also a stop's last step: WaitTunnels, closeAll.)
func (t *tunnelRun) end() {
	t.mu.Lock()
	if t.ended {
		t.mu.Unlock()
		return
	}
	t.ended = true
	var taken [2]bool
	for i := range t.dirs {
		taken[i] = t.p.conns.loop.take(&t.dirs[i].sl)
	}
	t.mu.Unlock()
	t.client.Close()
	t.up.Close()
	for i := range t.dirs {
		if taken[i] {
			t.done()
		}
	}
}

// park puts d in the set until src is readable or the tunnel's idle time
// passes; false when it cannot (d waits on its goroutine). A tunnel
// ending meanwhile ends d.
func (d *direction) park() (parked bool) {
	t := d.t
	t.mu.Lock()
	if t.ended {
		t.mu.Unlock()
		t.done()
		return true
	}
	parked = t.p.conns.loop.join(t.p, &d.sl, d.w.raw)
	t.mu.Unlock()
	return parked
}

// wake: src became readable (on a goroutine of its own).
func (d *direction) wake() { d.run() }

// expire: the tunnel was idle for its idle time.
func (d *direction) expire() {
	d.t.end()
	d.t.done()
}

// left is how long until the tunnel has been idle for its idle time.
func (d *direction) left() time.Duration {
	return time.Until(time.Unix(0, d.t.last.Load()).Add(d.t.idle))
}

// run copies src to dst until src ends (its EOF is passed on as a
// half-close), a write or a read fails (the tunnel ends), or neither
// direction moved a byte for the tunnel's idle time. With nothing to copy
// for parkAfter it parks. What came is moved at once: in the kernel
// (splice(2), through net.TCPConn.ReadFrom of exactly the bytes queued)
// when there is a lot of it between two plain TCP connections, else
// through a pooled buffer.
func (d *direction) run() {
	t := d.t
	if len(d.pending) > 0 {
		m, err := d.dst.Write(d.pending)
		d.n += int64(m)
		d.pending = nil
		if err != nil {
			t.end()
			t.done()
			return
		}
		t.last.Store(time.Now().UnixNano())
	}
	dt, _ := d.dst.(*net.TCPConn)
	st, _ := d.src.(*net.TCPConn)
	round := max(t.idle/2, time.Millisecond)
	for {
		now := time.Now()
		wait := round
		if !d.noPark {
			wait = min(parkAfter, round)
		}
		d.src.SetReadDeadline(now.Add(wait))
		queued, err := d.w.wait()
		var m int64
		if err == nil {
			d.dst.SetWriteDeadline(now.Add(t.idle))
			if dt != nil && st != nil && queued >= spliceTunnelMin {
				m, err = dt.ReadFrom(io.LimitReader(st, int64(queued)))
				if err == nil && m == 0 {
					err = io.EOF
				}
			} else {
				m, err = copyOnce(d.dst, d.src)
			}
		}
		d.n += m
		if m > 0 {
			t.last.Store(time.Now().UnixNano())
		}
		switch {
		case err == nil:
			continue
		case isTimeout(err) && time.Since(now) < t.idle && d.left() > 0:
			// The read's wait ended with nothing (a write that waited
			// idle is a side that stopped reading: the end), and the
			// tunnel is not idle yet: park, or wait again.
			if m == 0 && !d.noPark {
				if d.park() {
					return
				}
				d.noPark = true
			}
			continue
		case errors.Is(err, io.EOF):
			d.halfClose()
			t.done()
			return
		}
		t.end()
		t.done()
		return
	}
}

// halfClose passes src's EOF on: the other side sees EOF and can still
// answer. A connection that cannot half-close ends the tunnel.
func (d *direction) halfClose() {
	if cw, ok := d.dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		return
	}
	d.t.end()
}
