package forwarding

// This file holds idle client connections parked: a keep-alive
// connection with no request for parkAfter gives back everything it held
// while serving (its clientConn, with the read and write buffers and the
// transaction's, goes back to a pool, and the goroutine that served it,
// with its stack, ends) and waits for its next request in peerd's own
// epoll set (parkloop.go): no goroutine and no buffer, only the socket
// and a small record. When bytes come, a goroutine takes a clientConn
// from the pool and serves on; when the idle time
// (client_idle_timeout, or the shutdown's grace) ends first, the socket is
// closed and its slots released, as an idle connection that was not
// parked is. An office's thousands of idle browsers' connections cost
// their sockets and little more.

import (
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// parkAfter is how long a keep-alive connection waits for its next
// request, ready to read it, before it is parked: under load the next
// request comes well within it, and nothing is parked.
const parkAfter = 200 * time.Millisecond

// parked is an idle connection waiting for its next request with nothing
// of a clientConn's.
type parked struct {
	nc      net.Conn
	from    client
	counted bool
	// graced: stopping, the wait was cut to the grace's end (connSet,
	// under its lock).
	graced bool
	// deadline is the end of the idle wait (client_idle_timeout, or a
	// stop's grace), in Unix nanoseconds.
	deadline atomic.Int64
	w        waiter
	sl       sleeper // its place in the park loop's set (parkloop.go)
	p        *Proxy
}

// wake: the next request's bytes came (or the client closed).
func (pk *parked) wake() { pk.resume() }

// expire: the idle wait ended.
func (pk *parked) expire() { pk.finish() }

// cutTo brings the end of the idle wait to at, if that is sooner.
func (pk *parked) cutTo(at int64) {
	if at < pk.deadline.Load() {
		pk.deadline.Store(at)
	}
}

// left is how long the idle wait has left.
func (pk *parked) left() time.Duration { return time.Until(time.Unix(0, pk.deadline.Load())) }

// connPool holds clientConns between a parked connection's requests: a
// free list of at most maxFree (a sync.Pool keeps what it holds through
// one collection more, so a wave of connections gone idle would stay
// resident until the second; these are at most maxFree).
type connPool struct {
	mu   sync.Mutex
	free []*clientConn
}

const maxFree = 256

func (cp *connPool) get() *clientConn {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if n := len(cp.free); n > 0 {
		cc := cp.free[n-1]
		cp.free[n-1] = nil
		cp.free = cp.free[:n-1]
		return cc
	}
	return nil
}

func (cp *connPool) put(cc *clientConn) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if len(cp.free) < maxFree {
		cp.free = append(cp.free, cc)
	}
}

// takeConn is a clientConn for nc, from the free list when there is one.
func (p *Proxy) takeConn(nc net.Conn) *clientConn {
	cc := p.connFree.get()
	if cc == nil {
		return newClientConn(p, nc)
	}
	cc.rebind(nc)
	return cc
}

// rebind makes a pooled clientConn serve nc, keeping its buffers.
func (cc *clientConn) rebind(nc net.Conn) {
	cc.nc = nc
	cc.dl = deadlines{nc: nc}
	cc.r.Reset(nc)
	cc.rio = newRawIO(nc, cc.r, &cc.idle)
	cc.rio.init()
	cc.w.rebind(nc)
	cc.from, cc.graced, cc.counted, cc.refusal = client{}, false, false, false
	cc.idle.Store(false)
	cc.memo = requestMemo{}
}

// parkable says cc may be parked when idle: a plain socket (a TLS
// connection's state is not the socket's), counted (a refusal ends), and
// nothing of a next request buffered. (An answer's end held back to go
// with the wait, flushLater, is sent by that wait before any parking.)
func (cc *clientConn) parkable() bool {
	return cc.rio.raw != nil && cc.counted && cc.r.Buffered() == 0
}

// park hands cc's connection to the park loop (parkloop.go), or to a
// goroutine of its own that waits for the next request, until until, and
// gives cc back to the pool. The caller's goroutine then ends without
// closing the connection.
func (cc *clientConn) park(until time.Time) {
	p := cc.p
	pk := &parked{nc: cc.nc, from: cc.from, counted: cc.counted, p: p}
	pk.sl.of = pk
	pk.deadline.Store(until.UnixNano())
	pk.w.raw = cc.rio.raw
	p.conns.swapToParked(cc, pk)
	cc.nc, cc.rio, cc.dl = nil, rawIO{}, deadlines{}
	cc.r.Reset(nil)
	cc.w.rebind(nil)
	p.connFree.put(cc)
	if !p.conns.loop.join(p, &pk.sl, pk.w.raw) {
		go pk.wait()
	}
}

// wait waits on a goroutine of its own for the next request: bytes come,
// it is served; the wait ends first (its read deadline), it closes.
func (pk *parked) wait() {
	if _, err := pk.w.wait(); err == nil {
		pk.resume()
		return
	}
	pk.finish()
}

// resume serves the parked connection's next request with a pooled
// clientConn.
func (pk *parked) resume() {
	p := pk.p
	cc := p.takeConn(pk.nc)
	cc.from, cc.counted = pk.from, pk.counted
	if p.conns.swapFromParked(pk, cc) {
		cc.loop(false)
		return
	}
	cc.nc, cc.rio = nil, rawIO{}
	p.connFree.put(cc)
	pk.finish()
}

// finish closes the parked connection whose wait ended and releases its
// slots.
func (pk *parked) finish() {
	p := pk.p
	p.conns.dropParked(pk)
	pk.nc.Close()
	if pk.counted {
		p.conns.release()
		p.conns.releaseSource(pk.from.addr)
	}
}

// idleWait is how long an idle connection now waits before it is
// parked, and whether it may be: parking needs a plain socket and an
// idle wait longer than parkAfter.
func (cc *clientConn) idleWait(wait time.Duration) (time.Duration, bool) {
	if !cc.parkable() || wait <= parkAfter || cc.p.conns.closing() {
		return wait, false
	}
	return parkAfter, true
}

// A wave of connections gone idle leaves what served them as garbage
// that the runtime keeps until its next collection (two minutes away, with
// nothing allocating), and then returns to the system only slowly:
// thousands of parked connections would cost as much resident memory as
// served ones. When the parked connections grew by wave since the last
// return (and not within returnEvery), the memory is collected and
// returned at once (debug.FreeOSMemory: one collection, a few ms on a
// small heap). Open tunnels count with the parked connections.
const (
	wave        = 1024
	returnEvery = 30 * time.Second
)

// returnIdleMemory returns the memory of a wave of parked connections
// or open tunnels (mostly idle, their goroutines ended: what served them
// is garbage) once it stopped growing (janitor, once a second).
func (s *connSet) returnIdleMemory(now time.Time, tunnels int) {
	s.mu.Lock()
	n := len(s.parked) + tunnels
	settled := n <= s.parkedLastTick+wave/64 // the wave has ended
	due := n >= s.parkedAtReturn+wave && settled && now.Sub(s.lastReturn) >= returnEvery
	s.parkedLastTick = n
	if due {
		s.parkedAtReturn, s.lastReturn = n, now
	} else if n < s.parkedAtReturn {
		s.parkedAtReturn = n // they left: a new wave counts from here
	}
	s.mu.Unlock()
	if due {
		go debug.FreeOSMemory()
	}
}
