package forwarding

// This file holds CONNECT: the tunnel through a parent or DIRECT, and
// upgraded connections.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peerd/peerd/internal/h1"
	"github.com/peerd/peerd/selection"
)

// serveConnect tunnels CONNECT host:port through a parent (by CONNECT to
// it) or directly, walking the plan in the same loop as plain requests
// (walk), with the same dial step, in-flight accounting and decide. A
// parent's non-2xx answer is passed to the client and is not a peer
// failure; a failed connect is, and so is a reply that never came: the
// next hop is tried.
func (tx *txn) serveConnect() outcome {
	p := tx.cc.p
	req := &tx.req
	tx.facts = facts{tunnel: true} // never replayed once begun, never on an idle connection
	tx.plan = p.planner.Plan(selection.Request{Method: http.MethodConnect, URL: urlString(req.Target), ClientIP: tx.cc.remoteStr,
		Host: urlString(req.Host), Port: tx.port, User: tx.user})
	a := tx.walk()
	switch {
	case tx.clientGone:
		return closeConn
	case a != nil && a.hop.Peer == nil:
		tx.answeredBy(a.hop)
		return tx.tunnel(a, http.StatusOK, []byte("HTTP/1.1 200 Connection established\r\n\r\n"))
	case a != nil:
		tx.connectAnswer(a)
		return closeConn
	}
	e := tx.finalError()
	if e == nil {
		e = errorf(http.StatusServiceUnavailable, CodeNoPeers, "", "no live next hop for CONNECT %s", req.Target)
	}
	e.Close = true
	tx.fail(e)
	return closeConn
}

// connectVia asks a parent to open the tunnel. It reports whether the
// parent's final reply head was read (a.final, a.status); a.err says how
// it broke otherwise. The client is watched while the parent thinks: a
// client that leaves releases everything at once.
func (a *attempt) connectVia() {
	tx := a.tx
	c := a.conn
	cfg := tx.cfg
	req := &tx.req
	b := append(tx.out[:0], "CONNECT "...)
	b = append(append(b, req.Target...), " HTTP/1.1\r\nHost: "...)
	b = append(append(b, req.Target...), "\r\n"...)
	if ua := req.Get("User-Agent"); ua != nil && !cfg.removes([]byte("User-Agent")) {
		b = appendField(b, []byte("User-Agent"), ua)
	}
	if login := a.hop.Peer.Login(); login != "" {
		b = appendLogin(b, login, req)
	}
	if !cfg.reqNoVia {
		b = cfg.appendVia(b, req.Fields, req.Get("Via") != nil)
	}
	b = append(b, "\r\n"...)
	tx.out = b
	c.dl.writeIn(time.Now(), cfg.ReadTimeout)
	if _, err := c.nc.Write(b); err != nil {
		a.err = fmt.Errorf("sending CONNECT: %w", err)
		return
	}
	a.progress = headWritten
	w := tx.cc.watch(c.nc)
	head, err := a.connectReply()
	w.stop()
	if err != nil {
		a.err = fmt.Errorf("reading the CONNECT reply: %w", err)
		a.timedOut = isTimeout(err)
		return
	}
	a.final, a.status, a.head, a.progress = true, a.resp.Status, head, responseHead
}

// connectAnswer answers the client from a parent's CONNECT reply: a
// tunnel on 2xx, the parent's refusal as it is otherwise, or the error of
// a reply that never came.
func (tx *txn) connectAnswer(a *attempt) {
	if !a.final {
		a.release()
		e := tx.finalError()
		if e == nil {
			e = errorf(http.StatusBadGateway, CodeBadGateway, hopName(a.hop), "no reply to CONNECT")
		}
		e.Close = true
		tx.fail(e)
		return
	}
	c, cfg, head := a.conn, tx.cfg, a.head
	a.head = nil
	tx.answeredBy(a.hop)
	resp := &a.resp
	if resp.Status/100 == 2 {
		c.r.Release(head)
		tx.tunnel(a, http.StatusOK, []byte("HTTP/1.1 200 Connection established\r\n\r\n"))
		return
	}
	// The parent's refusal (403, 407, 503, ...) goes to the client as is.
	kind := resp.BodyFor(false)
	tx.keepAlive = false
	out := appendStatusLine(tx.out[:0], resp)
	out = tx.appendResponseFields(out, resp)
	out = append(out, "X-Peerd-Peer: "...)
	out = append(append(out, a.hop.Peer.Name()...), "\r\nConnection: close\r\n\r\n"...)
	tx.out = out
	tx.cc.w.Write(out)
	tx.sendHead(resp.Status)
	c.r.Release(head)
	a.body.Reset(c.r, kind, resp.ContentLength, cfg.maxHeader)
	io.Copy(tx.cc.w, io.LimitReader(&a.body, 1<<20))
	tx.cc.w.Flush()
	a.release()
}

// connectReply reads a parent's final answer to CONNECT. Interim (1xx)
// answers are skipped, never taken for the tunnel's start; a reply head
// larger than max_header_size is a broken answer.
func (a *attempt) connectReply() ([]byte, error) {
	c, cfg := a.conn, a.tx.cfg
	c.dl.readIn(time.Now(), cfg.ReadTimeout)
	for interim := 0; interim <= 8; interim++ {
		head, err := c.r.ReadHead(cfg.maxHeader)
		if err != nil {
			return nil, err
		}
		if err := h1.ParseResponse(head, &a.resp); err != nil {
			return nil, err
		}
		if a.resp.Status >= 200 {
			return head, nil
		}
		c.r.Release(head)
	}
	return nil, errTooManyInterim
}

// upgraded switches protocols: the 101 goes to the client and the two
// connections become a tunnel.
func (tx *txn) upgraded(a *attempt) outcome {
	out := appendStatusLine(tx.out[:0], &a.resp)
	out = tx.appendResponseFields(out, &a.resp)
	out = append(out, "Connection: Upgrade\r\nUpgrade: "...)
	out = append(append(out, a.resp.Upgrade...), "\r\n\r\n"...)
	tx.out = out
	tx.answeredBy(a.hop)
	a.conn.r.Release(a.head)
	a.head = nil
	return tx.tunnel(a, http.StatusSwitchingProtocols, out)
}

// tunnel answers the client with hello (whose status is status), then
// copies bytes both ways until both sides are done or idle for
// read_timeout, passing half-closes on.
func (tx *txn) tunnel(a *attempt, status int, hello []byte) outcome {
	p := tx.cc.p
	cc := tx.cc
	up := a.conn
	a.conn = nil
	defer a.release()
	tx.sendHead(status)
	tx.tunnelled = true
	cc.w.Write(hello)
	if cc.w.Flush() != nil {
		up.close()
		tx.clientGone = true
		return closeConn
	}
	release := p.tunnels.add(cc.nc, up.nc)
	defer release()
	cc.dl.setRead(time.Time{})
	up.dl.setRead(time.Time{})
	fromClient := cc.r.Peek()
	cc.r.Discard(len(fromClient))
	fromUp := up.r.Peek()
	up.r.Discard(len(fromUp))
	received, sent := splice(cc.nc, fromClient, up.nc, fromUp, tx.cfg.ReadTimeout)
	cc.nc.Close()
	up.close()
	tx.tunnelBytes(received, sent)
	return closeConn
}

// splice copies a→b and b→a (each after its pending bytes) until both
// directions end, and returns the bytes copied to a (what the access log
// counts) and to b. A side that sent EOF is half-closed on the other; when
// neither direction carries a byte for idle, both are closed.
func splice(a net.Conn, aPending []byte, b net.Conn, bPending []byte, idle time.Duration) (toA, toB int64) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		toA = pipe(a, b, bPending, idle, &last, b)
	}()
	toB = pipe(b, a, aPending, idle, &last, a)
	wg.Wait()
	return toA, toB
}

// pipe copies src to dst. Reads time out every idle; a timeout ends the
// tunnel only when the other direction was idle too.
func pipe(dst, src net.Conn, pending []byte, idle time.Duration, last *atomic.Int64, other net.Conn) int64 {
	var n int64
	if len(pending) > 0 {
		m, err := dst.Write(pending)
		n += int64(m)
		if err != nil {
			src.Close()
			dst.Close()
			return n
		}
	}
	bufp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bufp)
	buf := *bufp
	for {
		src.SetReadDeadline(time.Now().Add(idle))
		m, err := src.Read(buf)
		if m > 0 {
			last.Store(time.Now().UnixNano())
			dst.SetWriteDeadline(time.Now().Add(idle))
			if _, werr := dst.Write(buf[:m]); werr != nil {
				src.Close()
				dst.Close()
				return n
			}
			n += int64(m)
		}
		if err == nil {
			continue
		}
		if isTimeout(err) && time.Since(time.Unix(0, last.Load())) < idle {
			continue // the other direction is busy
		}
		if errors.Is(err, io.EOF) {
			closeWrite(dst)
			return n
		}
		src.Close()
		dst.Close()
		return n
	}
}

type closeWriter interface{ CloseWrite() error }

// closeWrite half-closes c so the other side sees EOF but can still
// answer; a connection that cannot half-close is closed.
func closeWrite(c net.Conn) {
	if cw, ok := c.(closeWriter); ok && cw.CloseWrite() == nil {
		return
	}
	c.Close()
}

// watcher reads the client connection while peerd waits on a next hop, so
// that a client that leaves is noticed at once. Bytes it reads (a client
// that talks first, or pipelines) stay buffered for later.
type watcher struct {
	cc   *clientConn
	done chan struct{}
	gone atomic.Bool   // the client closed or broke the connection
	left chan struct{} // closed when gone is set
}

// watch starts watching the client; when it leaves, up (if any) is
// closed, which ends any wait on it, and left is closed.
func (cc *clientConn) watch(up net.Conn) *watcher {
	w := &watcher{cc: cc, done: make(chan struct{}), left: make(chan struct{})}
	cc.dl.setRead(time.Time{})
	go func() {
		defer close(w.done)
		if err := cc.r.Fill(); err != nil && !isTimeout(err) {
			w.gone.Store(true)
			close(w.left)
			if up != nil {
				up.Close()
			}
		}
	}()
	return w
}

// stop ends the watch, waits for it, and reports whether the client left.
func (w *watcher) stop() bool {
	w.cc.dl.setRead(time.Unix(1, 0))
	<-w.done
	w.cc.dl.setRead(time.Time{})
	if w.gone.Load() {
		w.cc.tx.clientGone = true
	}
	return w.gone.Load()
}

// tunnelSet tracks open tunnels so shutdown can wait for them and, past
// shutdown_timeout, close them.
type tunnelSet struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	n     int
	zero  chan struct{} // closed when n drops to 0; nil when nobody waits
}

func (t *tunnelSet) add(a, b net.Conn) (release func()) {
	t.mu.Lock()
	if t.conns == nil {
		t.conns = make(map[net.Conn]struct{})
	}
	t.conns[a], t.conns[b] = struct{}{}, struct{}{}
	t.n++
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		delete(t.conns, a)
		delete(t.conns, b)
		t.n--
		if t.n == 0 && t.zero != nil {
			close(t.zero)
			t.zero = nil
		}
	}
}

// Tunnels returns the number of open tunnels.
func (p *Proxy) Tunnels() int {
	p.tunnels.mu.Lock()
	defer p.tunnels.mu.Unlock()
	return p.tunnels.n
}

// WaitTunnels waits for open tunnels to end; when ctx ends first it closes
// them and returns ctx's error.
func (p *Proxy) WaitTunnels(ctx context.Context) error {
	t := &p.tunnels
	t.mu.Lock()
	if t.n == 0 {
		t.mu.Unlock()
		return nil
	}
	if t.zero == nil {
		t.zero = make(chan struct{})
	}
	zero := t.zero
	t.mu.Unlock()
	select {
	case <-zero:
		return nil
	case <-ctx.Done():
	}
	t.mu.Lock()
	for c := range t.conns {
		c.Close()
	}
	t.mu.Unlock()
	<-zero
	return ctx.Err()
}
