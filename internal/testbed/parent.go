// Package testbed is the one set of fixtures that the end-to-end tests, the
// benchmark and the soak use to run peerd for real: loopback parents that
// record what reaches them and can be killed, black-holed or made to
// misbehave, and peerd and Squid processes started on generated configs.
// Every load loop built on it is bounded in count and time.
package testbed

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peerd/peerd/internal/blackhole"
)

// Parent is an in-process HTTP parent proxy on loopback. It answers every
// request itself (CONNECT is tunnelled to the requested address) and
// records every connection, so a probe (a connection with no bytes) can be
// told from a request. By default the answer is a line that describes the
// request as the parent saw it ("from NAME: GET URI body=N xff=... via=...
// auth=..."); with Size > 0 it is Size bytes. A request with Cache-Control
// only-if-cached gets 504, as from a sibling with nothing cached. POSTs
// with an X-Request-Id are remembered, so a POST seen twice can be told.
//
// Kill closes the listener and every connection (what peers see of a
// SIGKILLed process), Blackhole makes the address drop SYNs, Restart
// listens again. SetMode injects faults (see serveConn).
type Parent struct {
	Name string
	Addr string
	Size int

	mu      sync.Mutex
	ln      net.Listener
	open    map[net.Conn]bool
	records []*ConnRecord
	mode    string
	status  int
	header  http.Header
	hole    func()
	down    bool
	posts   map[string]int
	dups    int
	// arrivals since the last Restart (bounded), for "reached while dead"
	arrivals []time.Time

	requests atomic.Int64
}

// ConnRecord is what the parent saw on one connection.
type ConnRecord struct {
	At       time.Time
	Bytes    int
	Requests int
	Methods  []string
}

// NewParent starts a parent; size is its answers' body size (0: the
// describing line).
func NewParent(name string, size int) (*Parent, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Parent{Name: name, Addr: ln.Addr().String(), Size: size, open: map[net.Conn]bool{},
		posts: map[string]int{}, status: 200, header: http.Header{}}
	p.serve(ln)
	return p, nil
}

// Port is the parent's port.
func (p *Parent) Port() string { _, port, _ := net.SplitHostPort(p.Addr); return port }

// SetMode switches fault injection: "" answers normally; see serveConn.
func (p *Parent) SetMode(m string) {
	p.mu.Lock()
	p.mode = m
	p.mu.Unlock()
}

// SetStatus sets the status of the answers.
func (p *Parent) SetStatus(s int) {
	p.mu.Lock()
	p.status = s
	p.mu.Unlock()
}

// SetHeader adds a field to every answer ("" removes it).
func (p *Parent) SetHeader(k, v string) {
	p.mu.Lock()
	if v == "" {
		p.header.Del(k)
	} else {
		p.header.Set(k, v)
	}
	p.mu.Unlock()
}

// Records returns copies of the connection records, in arrival order.
func (p *Parent) Records() []ConnRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]ConnRecord, len(p.records))
	for i, c := range p.records {
		out[i] = *c
		out[i].Methods = append([]string(nil), c.Methods...)
	}
	return out
}

// Requests counts requests received.
func (p *Parent) Requests() int64 { return p.requests.Load() }

// RequestsOf counts requests received with one method ("" for all).
func (p *Parent) RequestsOf(method string) int {
	n := 0
	for _, r := range p.Records() {
		for _, m := range r.Methods {
			if method == "" || m == method {
				n++
			}
		}
	}
	return n
}

// POSTIDs returns how often each POST id arrived.
func (p *Parent) POSTIDs() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.posts))
	for k, v := range p.posts {
		out[k] = v
	}
	return out
}

// DuplicatePOSTs counts POSTs whose X-Request-Id arrived more than once.
func (p *Parent) DuplicatePOSTs() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dups
}

// ArrivalsBefore counts requests that arrived after the last restart and
// before t.
func (p *Parent) ArrivalsBefore(t time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, a := range p.arrivals {
		if a.Before(t) {
			n++
		}
	}
	return n
}

func (p *Parent) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln, p.down = ln, false
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			rec := &ConnRecord{At: time.Now()}
			p.mu.Lock()
			if p.down {
				p.mu.Unlock()
				c.Close()
				return
			}
			p.records = append(p.records, rec)
			if len(p.records) > 100000 {
				p.records = p.records[len(p.records)-50000:]
			}
			p.open[c] = true
			p.mu.Unlock()
			go p.serveConn(c, rec)
		}
	}()
}

type counting struct {
	r   io.Reader
	rec *ConnRecord
	mu  *sync.Mutex
}

func (c counting) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.mu.Lock()
	c.rec.Bytes += n
	c.mu.Unlock()
	return n, err
}

var filler = strings.Repeat("p", 64<<10)

// serveConn serves one connection. The fault modes:
//
//	close-at-once         accept, then close without reading
//	idle-close            keep-alive connections close after 1s idle
//	stale-second          the second request on a connection meets a reset
//	                      (the keep-alive race), unprocessed and unrecorded
//	reset-after-read      read the request, then reset
//	half-headers          half a response head, then reset
//	hang                  a head and part of the body, then nothing
//	silent                read the request, never answer
//	deny-connect          CONNECT gets 403
//	close-after-response  one exchange per connection
func (p *Parent) serveConn(c net.Conn, rec *ConnRecord) {
	defer func() {
		c.Close()
		p.mu.Lock()
		delete(p.open, c)
		p.mu.Unlock()
	}()
	br := bufio.NewReader(counting{r: c, rec: rec, mu: &p.mu})
	bw := bufio.NewWriter(c)
	p.mu.Lock()
	mode := p.mode
	p.mu.Unlock()
	if mode == "close-at-once" {
		return
	}
	for served := 0; ; served++ {
		if mode == "idle-close" {
			c.SetReadDeadline(time.Now().Add(time.Second))
		}
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if mode == "stale-second" && served > 0 {
			c.(*net.TCPConn).SetLinger(0)
			return
		}
		body, _ := io.ReadAll(req.Body)
		p.requests.Add(1)
		p.mu.Lock()
		if m := p.mode; m == "silent" || m == "hang" || strings.HasPrefix(m, "delay:") || m == "" {
			mode = m // these faults reach connections already open, as a hung process does
		}
		rec.Requests++
		rec.Methods = append(rec.Methods, req.Method)
		if p.arrivals != nil && len(p.arrivals) < 100000 {
			p.arrivals = append(p.arrivals, time.Now())
		}
		if id := req.Header.Get("X-Request-Id"); req.Method == http.MethodPost && id != "" {
			p.posts[id]++
			if p.posts[id] == 2 {
				p.dups++
			}
		}
		status := p.status
		header := p.header.Clone()
		p.mu.Unlock()
		if d, err := time.ParseDuration(req.Header.Get("X-Delay")); err == nil && d > 0 {
			time.Sleep(min(d, 10*time.Second)) // a slow answer, for collapsed requests
		}
		switch mode {
		case "reset-after-read":
			c.(*net.TCPConn).SetLinger(0)
			return
		case "half-headers":
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Ty")
			c.(*net.TCPConn).SetLinger(0)
			return
		case "hang":
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
			time.Sleep(time.Hour)
			return
		case "silent":
			time.Sleep(time.Hour)
			return
		}
		if d, ok := strings.CutPrefix(mode, "delay:"); ok {
			// Accepts and reads, answers late (a parent that is slow, not
			// dead).
			if wait, err := time.ParseDuration(d); err == nil {
				time.Sleep(wait)
			}
		}
		if req.Method == http.MethodConnect {
			if mode == "deny-connect" {
				io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 6\r\n\r\ndenied")
				return
			}
			p.tunnel(c, br, req.Host)
			return
		}
		if status == 200 && strings.Contains(req.Header.Get("Cache-Control"), "only-if-cached") {
			status = http.StatusGatewayTimeout // a sibling with nothing cached
		}
		fmt.Fprintf(bw, "HTTP/1.1 %d %s\r\nDate: %s\r\nContent-Type: text/plain\r\nX-Parent: %s\r\n", status, http.StatusText(status), time.Now().UTC().Format(http.TimeFormat), p.Name)
		for k, vv := range header {
			for _, v := range vv {
				fmt.Fprintf(bw, "%s: %s\r\n", k, v)
			}
		}
		size := p.Size
		if v := req.Header.Get("X-Size"); v != "" {
			size, _ = strconv.Atoi(v)
		}
		if size > 0 {
			fmt.Fprintf(bw, "Content-Length: %d\r\n\r\n", size)
			for n := size; n > 0; {
				k := min(n, len(filler))
				bw.WriteString(filler[:k])
				n -= k
			}
		} else {
			line := fmt.Sprintf("from %s: %s %s body=%d xff=%s via=%s auth=%s", p.Name, req.Method, req.RequestURI,
				len(body), req.Header.Get("X-Forwarded-For"), req.Header.Get("Via"), req.Header.Get("Proxy-Authorization"))
			fmt.Fprintf(bw, "Content-Length: %d\r\n\r\n%s", len(line), line)
		}
		if bw.Flush() != nil || mode == "close-after-response" {
			return
		}
	}
}

// tunnel connects a CONNECT to its target.
func (p *Parent) tunnel(c net.Conn, br *bufio.Reader, target string) {
	up, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer up.Close()
	io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	go func() { io.Copy(up, br); up.(*net.TCPConn).CloseWrite() }()
	io.Copy(c, up)
}

// Kill closes the listener and every connection: the port refuses.
func (p *Parent) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return
	}
	p.down = true
	p.ln.Close()
	for c := range p.open {
		c.Close()
	}
}

// Blackhole kills the parent and makes its address drop SYNs.
func (p *Parent) Blackhole() error {
	p.Kill()
	release, err := blackhole.At(p.Addr)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.hole = release
	p.mu.Unlock()
	return nil
}

// unhole ends a black hole, if there is one.
func (p *Parent) unhole() {
	p.mu.Lock()
	hole := p.hole
	p.hole = nil
	p.mu.Unlock()
	if hole != nil {
		hole()
	}
}

// Restart ends a black hole and listens on the same address again.
func (p *Parent) Restart() error {
	p.unhole()
	var ln net.Listener
	var err error
	for i := 0; i < 100; i++ {
		if ln, err = net.Listen("tcp", p.Addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("restart %s: %w", p.Name, err)
	}
	p.mu.Lock()
	p.arrivals = make([]time.Time, 0, 1024)
	p.mu.Unlock()
	p.serve(ln)
	return nil
}

// Close stops the parent for good.
func (p *Parent) Close() {
	p.Kill()
	p.unhole()
}
