package forwarding

// This file holds CONNECT: the tunnel through a parent or DIRECT, and
// upgraded connections; and the work of the set of open tunnels that
// shutdown waits for (the set is the Proxy's, proxy.go).

import (
	"bytes"
	"context"
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
		return tx.tunnel(a, http.StatusOK, connectEstablished, true)
	case a != nil:
		return tx.connectAnswer(a)
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
func (tx *txn) connectAnswer(a *attempt) outcome {
	if !a.final {
		a.release()
		e := tx.wk.finalError()
		if e == nil {
			e = errorf(http.StatusBadGateway, CodeBadGateway, hopName(a.hop), "no reply to CONNECT")
		}
		e.Close = true
		tx.fail(e)
		return closeConn
	}
	c, head := a.conn, a.head
	a.head = nil
	tx.answeredBy(a.hop)
	resp := &a.resp
	if resp.Status/100 == 2 {
		c.r.Release(head)
		return tx.tunnel(a, http.StatusOK, connectEstablished, true)
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
	return closeConn
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
	return tx.tunnel(a, http.StatusSwitchingProtocols, out, false)
}

// tunnel answers the client with hello (whose status is status), then
// relays bytes both ways (tunnelrun.go) until both sides are done or idle
// for read_timeout. Detached (a CONNECT), it returns at once: the tunnel
// has the client connection and ends the transaction itself (its log
// line, its generation) once its directions and this goroutine are done
// (clientConn.loop releases this one's share); so an idle tunnel keeps no
// goroutine. Not detached (an upgrade, whose answer came through the
// cache's steps), it waits for the tunnel to end.
func (tx *txn) tunnel(a *attempt, status int, hello []byte, detach bool) outcome {
	p := tx.p
	cc := tx.cc
	up := a.conn
	a.conn = nil
	tx.tunnelled = true
	cc.dl.setRead(time.Time{})
	up.dl.setRead(time.Time{})
	// What either side sent already is taken out, and the buffers that
	// held it go: a tunnel relays through none of its own.
	fromClient := bytes.Clone(cc.r.Peek())
	fromUp := bytes.Clone(up.r.Peek())
	cc.r.Shed()
	up.r.Shed()
	up.w = nil // (the hello goes through the client writer; up is written raw)
	if err := tx.w.tunnelHello(status, hello); err != nil {
		cc.nc.Close()
		up.close()
		a.release()
		return closeConn
	}
	var t *tunnelRun
	var done chan struct{} // closed at the end of a tunnel this goroutine waits for
	if !detach {
		done = make(chan struct{})
	}
	g := tx.rq.gen
	end := func(in, out int64) { // (both sockets are closed by now)
		tx.tunnelIn, tx.tunnelOut = in, out
		a.release()
		p.tunnels.remove(t)
		cc.tun.Store(nil)
		if !detach {
			close(done)
			return
		}
		tx.detached = false
		tx.finish()
		g.release()
		cc.end(false)
	}
	t = newTunnelRun(p, cc.nc, up.nc, fromClient, fromUp, g.cfg.ReadTimeout, end)
	p.tunnels.add(t)
	cc.tun.Store(t) // (a stop ends the tunnel, never closes its sockets itself)
	t.start()
	if detach {
		tx.detached = true
		return detached
	}
	t.done() // this goroutine's share
	<-done
	return closeConn
}

func (s *tunnelSet) add(t *tunnelRun) {
	s.mu.Lock()
	if s.open == nil {
		s.open = make(map[*tunnelRun]struct{})
	}
	s.open[t] = struct{}{}
	s.mu.Unlock()
}

func (s *tunnelSet) remove(t *tunnelRun) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.open, t)
	if len(s.open) == 0 && s.zero != nil {
		close(s.zero)
		s.zero = nil
	}
}

// Tunnels returns the number of open tunnels.
func (p *Proxy) Tunnels() int {
	p.tunnels.mu.Lock()
	defer p.tunnels.mu.Unlock()
	return len(p.tunnels.open)
}

// WaitTunnels waits for open tunnels to end; when ctx ends first it closes
// them and returns ctx's error.
func (p *Proxy) WaitTunnels(ctx context.Context) error {
	s := &p.tunnels
	s.mu.Lock()
	if len(s.open) == 0 {
		s.mu.Unlock()
		return nil
	}
	if s.zero == nil {
		s.zero = make(chan struct{})
	}
	zero := s.zero
	s.mu.Unlock()
	select {
	case <-zero:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	open := make([]*tunnelRun, 0, len(s.open))
	for t := range s.open {
		open = append(open, t)
	}
	s.mu.Unlock()
	for _, t := range open {
		t.end() // (outside s.mu: the tunnel's last step takes it)
	}
	<-zero
	return ctx.Err()
}
