package forwarding

// This file holds the bookkeeping of what the proxy has open: the task
// group that owns background work, and the set of listeners and client
// connections (max_connections, max_connections_per_source, shutdown).

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// taskGroup counts background tasks; once closed it starts no more, and
// the channel close returned is closed when the last one ends.
type taskGroup struct {
	mu     sync.Mutex
	n      int
	closed bool
	zero   chan struct{}
}

// add counts a new task; false once the group is closed (shutting down).
func (g *taskGroup) add() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.n++
	return true
}

func (g *taskGroup) done() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n--; g.n == 0 && g.zero != nil {
		close(g.zero)
		g.zero = nil
	}
}

// close refuses new tasks and returns a channel closed when none runs.
func (g *taskGroup) close() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	ch := make(chan struct{})
	if g.n == 0 {
		close(ch)
	} else if g.zero == nil {
		g.zero = ch
	} else {
		ch = g.zero
	}
	return ch
}

// connSet tracks listeners and client connections for shutdown and for
// max_connections.
type connSet struct {
	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*clientConn]struct{}
	parked    map[*parked]struct{} // idle connections waiting with no clientConn (park.go)
	loop      parkLoop             // the epoll set most of them wait in (parkloop.go)
	// parkedAtReturn and lastReturn: the parked connections when their
	// memory was last returned, and when; parkedLastTick: at the janitor's
	// last tick (returnIdleMemory).
	parkedAtReturn, parkedLastTick int
	lastReturn                     time.Time
	open                           atomic.Int64
	shutting                       atomic.Bool
	graceEnd                       atomic.Int64 // Unix ns: idle connections are closed after it
	// refusing counts connections being answered 403 (not in open).
	refusing atomic.Int64
	// perSource counts the open connections of each client address.
	srcMu     sync.Mutex
	perSource map[netip.Addr]int
}

// admitSource counts a connection from a unless max are open from it.
func (s *connSet) admitSource(a netip.Addr, max int) bool {
	s.srcMu.Lock()
	defer s.srcMu.Unlock()
	if s.perSource == nil {
		s.perSource = make(map[netip.Addr]int)
	}
	if s.perSource[a] >= max {
		return false
	}
	s.perSource[a]++
	return true
}

// fromSource is how many connections are open from a.
func (s *connSet) fromSource(a netip.Addr) int {
	s.srcMu.Lock()
	defer s.srcMu.Unlock()
	return s.perSource[a]
}

// releaseSource forgets one connection from a.
func (s *connSet) releaseSource(a netip.Addr) {
	s.srcMu.Lock()
	defer s.srcMu.Unlock()
	if n := s.perSource[a]; n > 1 {
		s.perSource[a] = n - 1
	} else {
		delete(s.perSource, a)
	}
}

func (s *connSet) init() {
	s.listeners = make(map[net.Listener]struct{})
	s.conns = make(map[*clientConn]struct{})
}

func (s *connSet) closing() bool { return s.shutting.Load() }

func (s *connSet) addListener(ln net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutting.Load() {
		return false
	}
	s.listeners[ln] = struct{}{}
	return true
}

func (s *connSet) removeListener(ln net.Listener) {
	s.mu.Lock()
	delete(s.listeners, ln)
	s.mu.Unlock()
}

// admit counts a new connection unless max are open.
func (s *connSet) admit(max int) bool {
	if s.open.Add(1) > int64(max) {
		s.open.Add(-1)
		return false
	}
	return true
}

func (s *connSet) add(c *clientConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutting.Load() {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

// remove forgets c; counted says whether it still counts towards
// max_connections (a connection that became a tunnel is counted by its
// tunnel until it ends).
func (s *connSet) remove(c *clientConn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

func (s *connSet) release() { s.open.Add(-1) }

func (s *connSet) beginClose(grace time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.shutting.Load() {
		s.graceEnd.Store(time.Now().Add(grace).UnixNano())
	}
	s.shutting.Store(true)
	for ln := range s.listeners {
		ln.Close()
	}
}

// graceLeft is how long idle connections may still wait for a request
// while stopping (shutdown_idle_grace from the stop).
func (s *connSet) graceLeft(now time.Time) time.Duration {
	return time.Duration(s.graceEnd.Load() - now.UnixNano())
}

// closeIdle ends the waits of connections idle for a request: until the
// grace is over, by making their wait end with it (a request that comes
// first is answered with Connection: close), then by closing them. It
// returns how many connections remain.
func (s *connSet) closeIdle(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	end := s.graceEnd.Load()
	for c := range s.conns {
		if !c.idle.Load() {
			continue
		}
		if now.UnixNano() >= end {
			c.nc.Close()
		} else if !c.graced {
			c.graced = true
			c.nc.SetReadDeadline(time.Unix(0, end))
		}
	}
	for pk := range s.parked {
		if !pk.graced {
			// Its wait ends at the grace's end, by its timer or its read
			// deadline (cutParked).
			pk.graced = true
			s.cutParked(pk, end)
		}
	}
	return len(s.conns) + len(s.parked)
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	var tunnels []*tunnelRun
	for c := range s.conns {
		if t := c.tun.Load(); t != nil {
			tunnels = append(tunnels, t) // its sockets are closed by its end alone
			continue
		}
		c.nc.Close()
	}
	now := time.Now().UnixNano()
	for pk := range s.parked {
		s.cutParked(pk, now)
	}
	s.mu.Unlock()
	for _, t := range tunnels {
		t.end() // (outside s.mu: the tunnel's last step removes its connection)
	}
}

// cutParked brings pk's wait's end to at, if that is sooner (under s.mu).
func (s *connSet) cutParked(pk *parked, at int64) {
	pk.cutTo(at)
	if !s.loop.rearm(&pk.sl) {
		// It waits on a goroutine, or will (join reads the deadline
		// after this): its read deadline ends the wait.
		pk.nc.SetReadDeadline(time.Unix(0, pk.deadline.Load()))
	}
}

// swapToParked puts pk, the idle connection cc served, in cc's place. A
// stop that began already cuts pk's wait to the grace's end.
func (s *connSet) swapToParked(cc *clientConn, pk *parked) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, cc)
	if s.parked == nil {
		s.parked = map[*parked]struct{}{}
	}
	s.parked[pk] = struct{}{}
	if s.shutting.Load() {
		pk.graced = true
		pk.cutTo(s.graceEnd.Load())
	}
	pk.nc.SetReadDeadline(time.Unix(0, pk.deadline.Load())) // here, so that closeIdle's later cut stands
}

// swapFromParked puts cc, which serves pk's connection now that a request
// came, in pk's place; false when pk was let go meanwhile.
func (s *connSet) swapFromParked(pk *parked, cc *clientConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.parked[pk]; !ok {
		return false
	}
	delete(s.parked, pk)
	s.conns[cc] = struct{}{}
	cc.graced = pk.graced
	return true
}

// dropParked forgets pk (its wait ended; it is being closed).
func (s *connSet) dropParked(pk *parked) {
	s.mu.Lock()
	delete(s.parked, pk)
	s.mu.Unlock()
}
