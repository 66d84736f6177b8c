package forwarding

// This file holds the per-hop pools of idle upstream connections.

import (
	"bufio"
	"crypto/tls"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/peerd/peerd/dialer"
	"github.com/peerd/peerd/internal/h1"
	"github.com/peerd/peerd/peers"
)

// upConn is a connection to a next hop that peerd owns: its buffers live
// as long as it does, so a keep-alive exchange allocates nothing.
type upConn struct {
	nc net.Conn
	r  *h1.Reader
	w  *bufio.Writer
	dl deadlines
	// pool is where the connection goes back when an exchange leaves it
	// reusable; nil for a connection that is never pooled.
	pool   *pool
	idleAt time.Time

	rio rawIO

	// tc is the TLS layer of a connection that speaks TLS (to a peer with
	// tls, or an https origin); nil in the clear. sock is the TCP
	// connection under it, when it is a dialer.Socket.
	tc   *tls.Conn
	sock *dialer.Socket

	// The non-blocking peek of an idle connection, made once per
	// connection so that a reuse allocates nothing. peekRaw is the socket
	// (under the TLS layer, if any); nil when there is none.
	peekRaw syscall.RawConn
	peekFn  func(fd uintptr)
	peekN   int
	peekErr error
	peekBuf [1]byte
}

func newUpConn(nc net.Conn, pl *pool) *upConn {
	c := &upConn{nc: nc, r: h1.NewReader(nc, 4<<10), w: bufio.NewWriterSize(nc, 4<<10), pool: pl, dl: deadlines{nc: nc}}
	c.rio = newRawIO(nc, c.r, nil)
	c.rio.init()
	c.peekRaw = c.rio.raw
	if tc, ok := nc.(*tls.Conn); ok {
		c.tc = tc
		c.sock, _ = tc.NetConn().(*dialer.Socket)
		if sc, ok := tc.NetConn().(syscall.Conn); ok {
			c.peekRaw, _ = sc.SyscallConn()
		}
	}
	c.peekFn = func(fd uintptr) { c.peekN, c.peekErr = rawPeek(fd, c.peekBuf[:]) }
	return c
}

func (c *upConn) close() { c.nc.Close() }

// idleState is what a look at an idle connection found.
type idleState uint8

const (
	idleOK     idleState = iota
	idleClosed           // the peer closed or broke it
	idleExtra            // the peer sent bytes nobody asked for
)

// peek looks at an idle connection without reading: EOF or an error means
// the peer is done with it; bytes mean the next hop answered something
// nobody asked (Go's Transport calls it an "unsolicited response on idle
// channel"), and those bytes must never answer the next request. In the
// clear it is a non-blocking MSG_PEEK and consumes nothing; over TLS see
// look.
func (c *upConn) peek() idleState { return c.look(true) }

// closedByPeer reports whether an idle connection is no use any more. It
// never waits (the reaper looks under the pool's lock): bytes on an idle
// TLS connection close it unclassified.
func (c *upConn) closedByPeer() bool { return c.look(false) != idleOK }

// look is peek; classify lets it read for up to tlsLookWait what arrived
// on an idle TLS connection, to tell an answer nobody asked for (counted)
// from a close_notify.
func (c *upConn) look(classify bool) idleState {
	if c.r.Buffered() > 0 {
		return idleExtra
	}
	if c.peekRaw == nil {
		return idleOK
	}
	if c.tc != nil {
		// What the TLS layer holds already (decrypted, or received
		// past the answer's last record) is invisible to the socket.
		if st := c.tlsHeld(); st != idleOK {
			return st
		}
	}
	// Control, not Read: the peek never waits, and the last exchange's
	// deadlines, which stay in force while the connection sits idle, must
	// not fail it (Read checks them first). A connection idle past its
	// last first-byte timeout (about a second) was closed as broken
	// instead of reused within pconn_timeout.
	if c.peekRaw.Control(c.peekFn) != nil {
		return idleClosed
	}
	n, err := c.peekN, c.peekErr
	switch {
	case n > 0 && c.tc != nil:
		// A TLS record: an answer nobody asked for, a close_notify, or
		// a late handshake message. Only an answer is counted; either
		// way the connection is not reused (a record cut short could
		// not be told from a message that is done).
		if classify {
			if st := c.tlsRead(time.Now().Add(tlsLookWait)); st == idleExtra {
				return idleExtra
			}
		}
		return idleClosed
	case n > 0:
		return idleExtra
	case n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK):
		return idleOK // nothing to read: the connection is fine
	}
	return idleClosed // EOF (n == 0) or an error
}

// tlsLookWait bounds the read of a record found on an idle TLS connection.
// A whole record is read at once; the wait is spent only on one cut short
// or on a late handshake message, and it leaves room for a loaded machine
// to get from setting the deadline to the read.
const tlsLookWait = 20 * time.Millisecond

// tlsHeld reads one byte of what the TLS layer holds, without reading the
// socket: through the dialer.Socket under it, or with a deadline in the
// past.
func (c *upConn) tlsHeld() idleState {
	if c.sock == nil {
		return c.tlsRead(time.Unix(1, 0))
	}
	c.sock.Holding = true
	n, err := c.tc.Read(c.peekBuf[:])
	c.sock.Holding = false
	return readState(n, err)
}

// tlsRead reads one byte through the TLS layer until deadline (in the
// past: only what the layer holds, without touching the socket). The
// read deadline is none afterwards.
func (c *upConn) tlsRead(deadline time.Time) idleState {
	c.dl.setRead(deadline)
	n, err := c.tc.Read(c.peekBuf[:])
	c.dl.setRead(time.Time{})
	return readState(n, err)
}

// readState is what a one-byte read of an idle connection found: idleOK
// when nothing came, idleExtra for an answer's byte, idleClosed for an end
// or an error.
func readState(n int, err error) idleState {
	switch {
	case n > 0:
		return idleExtra
	case isTimeout(err):
		return idleOK
	}
	return idleClosed
}

// pool is the idle list of one next hop. The newest connection is reused
// first, so a steady load keeps few connections warm and the rest expire.
type pool struct {
	mu   sync.Mutex
	idle []*upConn
	// gone: the pool was dropped from the set; what comes back is closed.
	gone bool
}

// maxIdlePerHop bounds a hop's idle list.
const maxIdlePerHop = 256

// get returns an idle connection that has not sat longer than maxIdle and
// that its peer has neither closed nor written to, or nil. The others are
// closed; extra counts those that held bytes nobody asked for.
func (pl *pool) get(now time.Time, maxIdle time.Duration) (c *upConn, extra int) {
	for {
		pl.mu.Lock()
		n := len(pl.idle)
		if n == 0 {
			pl.mu.Unlock()
			return nil, extra
		}
		c = pl.idle[n-1]
		pl.idle[n-1] = nil
		pl.idle = pl.idle[:n-1]
		pl.mu.Unlock()
		if now.Sub(c.idleAt) < maxIdle {
			switch c.peek() {
			case idleOK:
				// A deadline of its last exchange that has passed
				// would fail the next short write at once.
				c.dl.clearPassed(now)
				return c, extra
			case idleExtra:
				extra++
			}
		}
		c.close()
	}
}

// put returns c to the idle list. A connection with bytes already
// buffered past the answer it carried is never pooled (see peek): the
// caller checks with leftover first, to count and log it.
func (pl *pool) put(c *upConn, now time.Time) {
	if c.r.Buffered() > 0 {
		c.close()
		return
	}
	c.idleAt = now
	pl.mu.Lock()
	if !pl.gone && len(pl.idle) < maxIdlePerHop {
		pl.idle = append(pl.idle, c)
		c = nil
	}
	pl.mu.Unlock()
	if c != nil {
		c.close()
	}
}

// expire closes connections idle longer than maxIdle (or all, with 0),
// and those their peer has closed meanwhile, and reports how many stay.
func (pl *pool) expire(now time.Time, maxIdle time.Duration, drop bool) int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.gone = pl.gone || drop
	keep := pl.idle[:0]
	for _, c := range pl.idle {
		if !pl.gone && maxIdle > 0 && now.Sub(c.idleAt) < maxIdle && !c.closedByPeer() {
			keep = append(keep, c)
		} else {
			c.close()
		}
	}
	clear(pl.idle[len(keep):])
	pl.idle = keep
	return len(keep)
}

// pools holds the idle lists of every next hop: per peer handle, and per
// origin (scheme and authority) for DIRECT.
type pools struct {
	mu     sync.RWMutex
	peers  map[*peers.Peer]*pool
	direct map[string]*pool
}

func newPools() *pools {
	return &pools{peers: make(map[*peers.Peer]*pool), direct: make(map[string]*pool)}
}

func (ps *pools) forPeer(p *peers.Peer) *pool {
	ps.mu.RLock()
	pl := ps.peers[p]
	ps.mu.RUnlock()
	if pl != nil {
		return pl
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if pl = ps.peers[p]; pl == nil {
		pl = &pool{}
		ps.peers[p] = pl
	}
	return pl
}

// forOrigin returns the pool of an origin; key is scheme://host:port. The
// lookup converts key without allocating; only a new origin's entry does.
func (ps *pools) forOrigin(key []byte) *pool {
	ps.mu.RLock()
	pl := ps.direct[string(key)]
	ps.mu.RUnlock()
	if pl != nil {
		return pl
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if pl = ps.direct[string(key)]; pl == nil {
		pl = &pool{}
		ps.direct[string(key)] = pl
	}
	return pl
}

// expire closes idle connections older than maxIdle everywhere (all of
// them with 0), drops empty origin pools, and drops the pools of peers not
// in keep (nil keeps every peer).
func (ps *pools) expire(now time.Time, maxIdle time.Duration, keep map[*peers.Peer]bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for p, pl := range ps.peers {
		if keep != nil && !keep[p] {
			pl.expire(now, 0, true)
			delete(ps.peers, p)
			continue
		}
		pl.expire(now, maxIdle, false)
	}
	for k, pl := range ps.direct {
		pl.mu.Lock()
		empty := len(pl.idle) == 0
		pl.gone = pl.gone || empty
		pl.mu.Unlock()
		if empty || pl.expire(now, maxIdle, false) == 0 {
			pl.expire(now, 0, true)
			delete(ps.direct, k)
		}
	}
}
