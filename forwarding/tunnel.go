package forwarding

// This file holds CONNECT: the tunnel through a parent or DIRECT, and
// upgraded connections; and the work of the set of open tunnels that
// shutdown waits for (the set is the Proxy's, proxy.go).

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"time"

	"github.com/peerd/peerd/selection"
)

// connectEstablished is the client's answer when a tunnel opens.
var connectEstablished = []byte("HTTP/1.1 200 Connection established\r\n\r\n")

// serveConnect tunnels CONNECT host:port through a parent (by CONNECT to
// it) or directly, walking the plan with the same walker as plain
// requests, with the same dial step, in-flight accounting and decide. A
// parent's non-2xx answer is passed to the client and is not a peer
// failure; a failed connect is, and so is a reply that never came: the
// next hop is tried.
func (tx *txn) serveConnect() outcome {
	rq := &tx.rq
	req := &rq.req
	rq.facts = facts{tunnel: true} // never replayed once begun, never on an idle connection
	tx.wk.begin(rq.gen.routing.Plan(selection.Request{Method: http.MethodConnect, URL: urlString(req.Target), ClientIP: rq.from.str,
		Host: urlString(req.Host), Port: rq.port, User: rq.user}))
	a := tx.wk.walk()
	switch {
	case tx.w.gone:
		return closeConn
	case a != nil && a.hop.Peer == nil:
		tx.answeredBy(a.hop)
		return tx.tunnel(a, http.StatusOK, connectEstablished)
	case a != nil:
		tx.connectAnswer(a)
		return closeConn
	}
	e := tx.wk.finalError()
	if e == nil {
		e = errorf(http.StatusServiceUnavailable, CodeNoPeers, "", "no live next hop for CONNECT %s", req.Target)
	}
	e.Close = true
	tx.fail(e)
	return closeConn
}

// connectAnswer answers the client from a parent's CONNECT reply: a
// tunnel on 2xx, the parent's refusal as it is otherwise, or the error of
// a reply that never came.
func (tx *txn) connectAnswer(a *attempt) {
	if !a.final {
		a.release()
		e := tx.wk.finalError()
		if e == nil {
			e = errorf(http.StatusBadGateway, CodeBadGateway, hopName(a.hop), "no reply to CONNECT")
		}
		e.Close = true
		tx.fail(e)
		return
	}
	c, head := a.conn, a.head
	a.head = nil
	tx.answeredBy(a.hop)
	resp := &a.resp
	if resp.Status/100 == 2 {
		c.r.Release(head)
		tx.tunnel(a, http.StatusOK, connectEstablished)
		return
	}
	// The parent's refusal (403, 407, 503, ...) goes to the client as is.
	kind := resp.BodyFor(false)
	tx.w.last()
	out := appendStatusLine(tx.out[:0], resp)
	out = tx.rq.appendResponseFields(out, resp, a.hop)
	out = append(out, "X-Peerd-Peer: "...)
	out = append(append(out, a.hop.Peer.Name()...), "\r\nConnection: close\r\n\r\n"...)
	tx.out = out
	if tx.w.writeHead(resp.Status, out) == nil {
		c.r.Release(head)
		a.body.Reset(c.r, kind, resp.ContentLength, tx.rq.gen.cfg.maxHeader)
		tx.w.copyFrom(&a.body, 1<<20)
	}
	a.release()
}

// upgraded switches protocols: the 101 goes to the client and the two
// connections become a tunnel.
func (tx *txn) upgraded(a *attempt) outcome {
	out := appendStatusLine(tx.out[:0], &a.resp)
	out = tx.rq.appendResponseFields(out, &a.resp, a.hop)
	out = append(out, "Connection: Upgrade\r\nUpgrade: "...)
	out = append(append(out, a.resp.Upgrade...), "\r\n\r\n"...)
	tx.out = out
	tx.answeredBy(a.hop)
	a.conn.r.Release(a.head)
	a.head = nil
	return tx.tunnel(a, http.StatusSwitchingProtocols, out)
}

// tunnel answers the client with hello (whose status is status), then
// has the client writer copy bytes both ways until both sides are done or
// idle for read_timeout.
func (tx *txn) tunnel(a *attempt, status int, hello []byte) outcome {
	p := tx.p
	cc := tx.cc
	up := a.conn
	a.conn = nil
	defer a.release()
	tx.tunnelled = true
	release := p.tunnels.add(cc.nc, up.nc)
	defer release()
	cc.dl.setRead(time.Time{})
	up.dl.setRead(time.Time{})
	// What either side sent already is taken out, and the buffers that
	// held it go: a tunnel relays through none of its own (relay.go).
	fromClient := bytes.Clone(cc.r.Peek())
	fromUp := bytes.Clone(up.r.Peek())
	cc.r.Shed()
	up.r.Shed()
	up.w = nil // (the hello goes through the client writer; up is written raw)
	in, out, err := tx.w.tunnel(status, hello, up.nc, fromClient, fromUp, tx.rq.gen.cfg.ReadTimeout)
	cc.nc.Close()
	up.close()
	if err == nil {
		tx.tunnelIn, tx.tunnelOut = in, out
	}
	return closeConn
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
