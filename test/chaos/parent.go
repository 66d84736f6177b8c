package main

// This file holds the fault-injecting parent: a proxy on loopback that is
// also the origin behind it. Each request carries its exchange's number
// (X-Chaos-Id, or in a CONNECT's host); the schedule says what the parent
// does with it on this arrival, and every answer says so in X-Chaos-Fault.
// The parent can be killed (its port closed, its connections reset) and
// started again on the same port.

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// record is what all parents saw, shared: arrivals per exchange, POSTs
// that reached the origin, and each parent's own faults with their times.
type record struct {
	mu       sync.Mutex
	arrivals map[uint64]int
	posts    map[uint64]int
	faults   map[string][]time.Time // the parent's own faults (parentsFault), by parent
	kills    map[string][]time.Time // when each parent was killed
	// tunnels names the parent that opened each exchange's tunnel: peerd
	// answers a CONNECT with a 200 of its own, which does not say.
	tunnels  map[uint64]string
	injected [faultKinds]int
	parked   int // exchanges sent on a kept-alive connection idle long enough to be parked
}

// parkedSend counts an exchange sent after an idle pause (schedule.go).
func (r *record) parkedSend() {
	r.mu.Lock()
	r.parked++
	r.mu.Unlock()
}

func newRecord() *record {
	return &record{arrivals: map[uint64]int{}, posts: map[uint64]int{}, faults: map[string][]time.Time{}, kills: map[string][]time.Time{}, tunnels: map[uint64]string{}}
}

// arrive counts an arrival of exchange id and returns its number (0 first).
func (r *record) arrive(id uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.arrivals[id]
	r.arrivals[id] = n + 1
	return n
}

func (r *record) injectedAt(parent string, f fault, at time.Time) {
	r.mu.Lock()
	r.injected[f]++
	r.mu.Unlock()
	if f.parentsFault() {
		r.blameable(parent, at)
	}
}

// blameable notes a failure of the parent's own at at (I4).
func (r *record) blameable(parent string, at time.Time) {
	r.mu.Lock()
	r.faults[parent] = append(r.faults[parent], at)
	r.mu.Unlock()
}

// tunneled notes that parent opened exchange id's tunnel.
func (r *record) tunneled(id uint64, parent string) {
	r.mu.Lock()
	r.tunnels[id] = parent
	r.mu.Unlock()
}

// tunnelParent is the parent that opened exchange id's tunnel ("": none).
func (r *record) tunnelParent(id uint64) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tunnels[id]
}

// killedBetween reports whether parent was killed between from and to.
func (r *record) killedBetween(parent string, from, to time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range r.kills[parent] {
		if !t.Before(from) && !t.After(to) {
			return true
		}
	}
	return false
}

// killTimes are the times parent was killed (for a report).
func (r *record) killTimes(parent string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, t := range r.kills[parent] {
		out = append(out, t.Format("15:04:05.000"))
	}
	return out
}

func (r *record) posted(id uint64) {
	r.mu.Lock()
	r.posts[id]++
	r.mu.Unlock()
}

// parent is one fault-injecting parent.
type parent struct {
	name  string
	addr  string
	seed  uint64
	start time.Time
	rec   *record

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
	// The run-level faults beyond its door, while they last: it cannot
	// reach the origin (cantReach), or has no next hop at all (noHop).
	cantReach, noHop bool
}

// beyond starts (on) or ends a run-level fault beyond the parent's door.
func (p *parent) beyond(ev event, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch ev {
	case unreachOrigin:
		p.cantReach = on
	case loseNextHop:
		p.noHop = on
	}
}

func newParent(name string, seed uint64, start time.Time, rec *record) (*parent, error) {
	p := &parent{name: name, seed: seed, start: start, rec: rec, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.addr, p.ln = ln.Addr().String(), ln
	go p.serve(ln)
	return p, nil
}

func (p *parent) port() string { _, port, _ := net.SplitHostPort(p.addr); return port }

// kill closes the port and resets every connection: the parent is gone.
// The time is noted first, so that a client that sees its cut sees the
// kill before it.
func (p *parent) kill() {
	now := time.Now()
	p.rec.blameable(p.name, now) // a death is the parent's own fault
	p.rec.mu.Lock()
	p.rec.kills[p.name] = append(p.rec.kills[p.name], now)
	p.rec.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		reset(c)
	}
}

// restart opens the same port again.
func (p *parent) restart() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		return nil
	}
	var err error
	for i := 0; i < 50; i++ { // the port may linger a moment
		var ln net.Listener
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			p.ln = ln
			go p.serve(ln)
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

func (p *parent) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.ln != ln {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.conns[c] = true
		p.mu.Unlock()
		go func() {
			p.serveConn(c)
			p.mu.Lock()
			delete(p.conns, c)
			p.mu.Unlock()
		}()
	}
}

// reset closes c with an RST.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

func (p *parent) serveConn(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		c.SetReadDeadline(time.Now().Add(2 * time.Minute))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if !p.answer(c, br, req) {
			return
		}
	}
}

// exchangeID is the exchange a request belongs to; ok false for peerd's
// own requests (probes, through the parent to a destination too), which
// are always answered well but for the faults beyond its door.
func exchangeID(req *http.Request) (uint64, bool) {
	if req.Header.Get("User-Agent") == "peerd-probe" {
		return 0, false
	}
	v := req.Header.Get("X-Chaos-Id")
	if req.Method == http.MethodConnect {
		host, _, _ := net.SplitHostPort(req.Host)
		v = strings.TrimSuffix(strings.TrimPrefix(host, "echo-"), ".chaos.test")
	}
	id, err := strconv.ParseUint(v, 10, 64)
	return id, err == nil
}

// answer answers one request; false ends the connection.
func (p *parent) answer(c net.Conn, br *bufio.Reader, req *http.Request) bool {
	reqBody, err := io.ReadAll(req.Body)
	if err != nil {
		return false
	}
	id, ours := exchangeID(req)
	f := normal
	if ours {
		f = faultFor(p.seed, id, p.rec.arrive(id))
	}
	if req.Method == http.MethodConnect && f != resetHead && f != closeEarly && f != own503 && f != lateHead && f != nextHopFailed {
		f = normal // a tunnel has no body to cut
	}
	if req.Method == http.MethodHead && f.cutsBody() {
		f = normal // nor has a HEAD
	}
	p.mu.Lock()
	cantReach, noHop := p.cantReach, p.noHop
	p.mu.Unlock()
	health := (req.Method == http.MethodOptions || req.Method == http.MethodTrace) && req.Header.Get("Max-Forwards") == "0"
	switch {
	case noHop && !health:
		f = noNextHop
	case cantReach && req.Method != http.MethodConnect && !health:
		f = unreachableOrigin
	}
	now := time.Now()
	if ours {
		p.rec.injectedAt(p.name, f, now)
	}
	switch {
	case f == noNextHop:
		// A peerd whose own parents are all dead.
		fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nX-Chaos-Fault: %s\r\nX-Peerd-Error: no-peers\r\nProxy-Status: %s; error=destination_unavailable; no-next-hop\r\nContent-Length: 0\r\n\r\n", f, p.name)
		return true
	case f == unreachableOrigin || f == nextHopFailed:
		// Its connect to the origin refused, as Squid says it.
		fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nX-Chaos-Fault: %s\r\nX-Squid-Error: ERR_CONNECT_FAIL 111\r\nContent-Length: 0\r\n\r\n", f)
		return true
	case health && noHop:
		// Its answer to a health probe says it has no next hop.
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nProxy-Status: %s; no-next-hop\r\nContent-Length: 0\r\n\r\n", p.name)
		return true
	}
	switch f {
	case resetHead:
		reset(c)
		return false
	case closeEarly:
		return false
	case lateHead:
		time.Sleep(lateBy)
	}
	if ours && req.Method == http.MethodPost {
		p.rec.posted(id) // it reached the origin
	}
	if req.Method == http.MethodConnect {
		if ours && f != own503 {
			p.rec.tunneled(id, p.name)
		}
		return p.tunnel(c, br, f)
	}
	status, fields, b := p.content(req, id, reqBody, now)
	switch f {
	case own503:
		status, b = 503, []byte("the parent is overloaded\n")
		fields = "Proxy-Status: " + p.name + "; error=proxy_internal_error\r\nCache-Control: no-store\r\n"
	case origin5xx:
		status, b = 500, []byte("the origin failed\n")
		fields = "Cache-Control: no-store\r\n"
	}
	head := fmt.Sprintf("HTTP/1.1 %d %s\r\nX-Chaos-Fault: %s\r\nX-Chaos-Parent: %s\r\n%s", status, http.StatusText(status), f, p.name, fields)
	if req.Method == http.MethodHead {
		b = nil
	}
	switch f {
	case badChunk:
		fmt.Fprintf(c, "%sTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\nzz\r\n", head, len(b)/2, b[:len(b)/2])
		return false
	case shortBody:
		fmt.Fprintf(c, "%sContent-Length: %d\r\n\r\n%s", head, len(b), b[:len(b)/2])
		return false
	case resetBody:
		fmt.Fprintf(c, "%sContent-Length: %d\r\n\r\n%s", head, len(b), b[:len(b)/2])
		reset(c)
		return false
	}
	length := len(b)
	if req.Method == http.MethodHead {
		length = headLength(req)
	}
	if f == extraBytes {
		// The bytes past the end go in the same write as the head and
		// the body, so they are there when peerd has read the answer.
		// Written on their own, they may land after peerd has put the
		// connection back and reused it (seeds 103 and 109 found it
		// after a body and after a bodiless HEAD answer): no client can
		// tell them from the next answer then, in peerd as in any
		// HTTP/1.1 client (docs/health.md, "Bytes past the end").
		all := fmt.Appendf(nil, "%sContent-Length: %d\r\n\r\n%s", head, length, b)
		all = append(all, "HTTP/1.1 200 OK\r\nX-Chaos-Smuggled: 1\r\nContent-Length: 5\r\n\r\nextra"...)
		_, err := c.Write(all)
		return err == nil
	}
	fmt.Fprintf(c, "%sContent-Length: %d\r\n\r\n", head, length)
	if f == trickle {
		for i := 0; i < 4; i++ {
			c.Write(b[i*len(b)/4 : (i+1)*len(b)/4])
			time.Sleep(80 * time.Millisecond)
		}
	} else if _, err := c.Write(b); err != nil {
		return false
	}
	return true
}

// content is the origin's answer to req: a cacheable object at its
// version now, an uncacheable answer for exchange id, or the digest of a
// POST's body.
func (p *parent) content(req *http.Request, id uint64, reqBody []byte, now time.Time) (int, string, []byte) {
	path := req.URL.Path
	switch {
	case strings.HasPrefix(path, "/c/"):
		n, _ := strconv.Atoi(strings.TrimPrefix(path, "/c/"))
		v := versionAt(now.Sub(p.start))
		fields := "ETag: " + etag(v) + "\r\nCache-Control: max-age=2\r\nContent-Type: text/plain\r\n"
		if inm := req.Header.Get("If-None-Match"); inm != "" && versionOf(inm) == uint64(v) {
			return 304, fields, nil
		}
		return 200, fields, body(path, uint64(v), objectSize(n))
	case req.Method == http.MethodPost:
		sum := sha256.Sum256(reqBody)
		return 200, "Cache-Control: no-store\r\nX-Chaos-Served: " + strconv.FormatUint(id, 10) + "\r\n", []byte(hex.EncodeToString(sum[:]))
	}
	return 200, "Cache-Control: no-store\r\nX-Chaos-Served: " + strconv.FormatUint(id, 10) + "\r\n", body(path, id, 1000)
}

// headLength is the Content-Length a GET of req's path would have.
func headLength(req *http.Request) int {
	if n, err := strconv.Atoi(strings.TrimPrefix(req.URL.Path, "/c/")); err == nil {
		return objectSize(n)
	}
	return 1000
}

// tunnel answers a CONNECT (its own 503 when f says so) and echoes.
func (p *parent) tunnel(c net.Conn, br *bufio.Reader, f fault) bool {
	if f == own503 {
		fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nX-Chaos-Fault: %s\r\nProxy-Status: %s; error=proxy_internal_error\r\nContent-Length: 0\r\n\r\n", f, p.name)
		return true
	}
	fmt.Fprintf(c, "HTTP/1.1 200 Connection established\r\nX-Chaos-Fault: %s\r\nX-Chaos-Parent: %s\r\n\r\n", f, p.name)
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	io.Copy(c, br)
	return false
}
