package forwarding

import (
	"bufio"
	"context"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/peerd/peerd/dialer"
	"github.com/peerd/peerd/selection"
)

// serveConnect tunnels CONNECT host:port through a parent (by CONNECT to
// it) or directly. A parent's non-200 answer is passed to the client and is
// not a peer failure; a failed connect is, and the next hop is tried.
func (p *Proxy) serveConnect(w http.ResponseWriter, r *http.Request, ex *exchange) {
	c := p.config()
	ex.tunnel = true
	target := r.RequestURI
	ex.url = target
	host, port, err := net.SplitHostPort(target)
	if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
		ex.fail(w, errorf(http.StatusBadRequest, CodeBadRequest, "", "CONNECT needs host:port, got %q", target))
		return
	}
	if e := c.loopError(r.Header); e != nil {
		ex.fail(w, e)
		return
	}
	ctx := r.Context()
	plan := p.planner.Plan(selection.Request{Method: http.MethodConnect, URL: target, ClientIP: ex.client})
	var lastErr *Error
	for hop, ok := plan.Next(); ok; hop, ok = plan.Next() {
		if hop.Peer == nil {
			conn, err := p.hopDial(p.dialOrigin)(ctx, "tcp", target)
			if err != nil {
				if ctx.Err() != nil {
					ex.clientGone = true
					return
				}
				lastErr = errorf(http.StatusBadGateway, CodeConnectFailed, "", "connect to %s: %v", target, err)
				continue
			}
			ex.hop, ex.hopped = hop, true
			p.splice(w, ex, conn, nil)
			return
		}
		if !p.acct.BeginRequest(hop.Peer) {
			continue
		}
		done, err := p.connectVia(w, r, ex, hop, target)
		if done {
			return
		}
		p.acct.EndRequest(hop.Peer)
		if ctx.Err() != nil {
			ex.clientGone = true
			return
		}
		lastErr = err
	}
	if lastErr == nil {
		lastErr = errorf(http.StatusServiceUnavailable, CodeNoPeers, "", "no live next hop for CONNECT %s", target)
	}
	ex.fail(w, lastErr)
}

// connectVia asks a parent to open the tunnel. It returns done when the
// client got an answer (a tunnel, or the parent's refusal); otherwise the
// error explains why the next hop should be tried. The caller releases the
// peer's in-flight slot only when done is false.
func (p *Proxy) connectVia(w http.ResponseWriter, r *http.Request, ex *exchange, hop selection.Hop, target string) (bool, *Error) {
	c := p.config()
	peer := hop.Peer
	conn, err := p.dialer.DialPeer(r.Context(), peer, dialer.Traffic)
	if err != nil {
		return false, errorf(http.StatusBadGateway, CodeConnectFailed, peer.Name(), "%v", err)
	}
	req := &http.Request{
		Method: http.MethodConnect, URL: &url.URL{Host: target}, Host: target,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: make(http.Header),
	}
	if login := peer.Login(); login != "" {
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(login)))
	}
	if ua := r.Header.Get("User-Agent"); ua != "" {
		req.Header.Set("User-Agent", ua)
	}
	appendVia(req.Header, c.via)
	conn.SetDeadline(time.Now().Add(c.ReadTimeout))
	if err := req.Write(conn); err != nil {
		conn.Close()
		return false, errorf(http.StatusBadGateway, CodeBadGateway, peer.Name(), "sending CONNECT: %v", err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return false, errorf(http.StatusBadGateway, CodeBadGateway, peer.Name(), "reading CONNECT reply: %v", err)
	}
	ex.hop, ex.hopped = hop, true
	if resp.StatusCode != http.StatusOK {
		// The parent's answer (e.g. 403, 407, 503) goes to the client as is.
		defer p.acct.EndRequest(peer)
		defer conn.Close()
		h := w.Header()
		for k, vv := range resp.Header {
			if k == "Connection" || k == "Keep-Alive" || k == "Proxy-Connection" || k == "Transfer-Encoding" {
				continue
			}
			h[k] = vv
		}
		appendVia(h, c.via)
		h.Set("X-Peerd-Peer", peer.Name())
		h.Set("Connection", "close")
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		return true, nil
	}
	conn.SetDeadline(time.Time{})
	defer p.acct.EndRequest(peer)
	p.splice(w, ex, conn, br)
	return true, nil
}

// splice answers 200 to the client and copies bytes both ways until both
// sides are done, propagating half-closes.
func (p *Proxy) splice(w http.ResponseWriter, ex *exchange, up net.Conn, upBuf *bufio.Reader) {
	rc := http.NewResponseController(w)
	client, brw, err := rc.Hijack()
	if err != nil {
		up.Close()
		ex.fail(w, errorf(http.StatusInternalServerError, CodeBadRequest, "", "cannot tunnel on this connection: %v", err))
		return
	}
	stopFraming(client)
	ex.status = http.StatusOK
	release := p.tunnels.add(client, up)
	defer release()
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		client.Close()
		up.Close()
		return
	}
	var fromUp io.Reader = up
	if upBuf != nil && upBuf.Buffered() > 0 {
		fromUp = io.MultiReader(io.LimitReader(upBuf, int64(upBuf.Buffered())), up)
	}
	var fromClient io.Reader = client
	if n := brw.Reader.Buffered(); n > 0 {
		fromClient = io.MultiReader(io.LimitReader(brw.Reader, int64(n)), client)
	}
	var wg sync.WaitGroup
	var sent, received int64
	wg.Add(2)
	go func() {
		defer wg.Done()
		sent, _ = io.Copy(up, fromClient)
		closeWrite(up)
	}()
	go func() {
		defer wg.Done()
		received, _ = io.Copy(client, fromUp)
		closeWrite(client)
	}()
	wg.Wait()
	client.Close()
	up.Close()
	ex.tunnelBytes = received + sent
}

type closeWriter interface{ CloseWrite() error }

// closeWrite half-closes c (through peerd's wrappers) so the other side
// sees EOF but can still answer; a conn that cannot half-close is closed.
func closeWrite(c net.Conn) {
	if cw, ok := c.(closeWriter); ok && cw.CloseWrite() == nil {
		return
	}
	c.Close()
}

// CloseWrite half-closes the underlying connection.
func (c *hopConn) CloseWrite() error { return closeWriteOf(c.Conn) }

// CloseWrite half-closes the underlying connection.
func (c *framingConn) CloseWrite() error { return closeWriteOf(c.Conn) }

func closeWriteOf(c net.Conn) error {
	if cw, ok := c.(closeWriter); ok {
		return cw.CloseWrite()
	}
	return c.Close()
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
