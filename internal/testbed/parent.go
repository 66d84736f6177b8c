// Package testbed is the one set of fixtures that the benchmark and the
// soak use to run peerd for real: loopback parents that count what reaches
// them and can be killed, refused or black-holed, and peerd (or Squid)
// processes started on generated configs. Every load loop built on it is
// bounded in count and time.
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
// request itself with a body of Size bytes (CONNECT is tunnelled to the
// requested address), counts requests by method, and remembers each POST's
// X-Request-Id so that a POST seen twice can be told. Kill closes the
// listener and every connection (what peers see of a SIGKILLed process),
// Blackhole makes its address drop SYNs, Restart listens again.
type Parent struct {
	Name string
	Addr string
	Size int

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
	hole  func()
	down  bool
	posts map[string]int
	dups  int
	// arrivals since the last Restart (bounded), for "reached while dead"
	arrivals []time.Time

	requests atomic.Int64
	byMethod sync.Map // method -> *atomic.Int64
}

// NewParent starts a parent answering with size-byte bodies.
func NewParent(name string, size int) (*Parent, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Parent{Name: name, Addr: ln.Addr().String(), Size: size, conns: map[net.Conn]bool{}, posts: map[string]int{}}
	p.serve(ln)
	return p, nil
}

// Port is the parent's port.
func (p *Parent) Port() string { _, port, _ := net.SplitHostPort(p.Addr); return port }

// Requests counts requests received.
func (p *Parent) Requests() int64 { return p.requests.Load() }

// Method counts requests received with one method.
func (p *Parent) Method(m string) int64 {
	if c, ok := p.byMethod.Load(m); ok {
		return c.(*atomic.Int64).Load()
	}
	return 0
}

// DuplicatePOSTs counts POSTs whose X-Request-Id arrived more than once.
func (p *Parent) DuplicatePOSTs() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dups
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
			p.mu.Lock()
			if p.down {
				p.mu.Unlock()
				c.Close()
				return
			}
			p.conns[c] = true
			p.mu.Unlock()
			go p.serveConn(c)
		}
	}()
}

var body = strings.Repeat("p", 64<<10)

func (p *Parent) serveConn(c net.Conn) {
	defer func() {
		c.Close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	br := bufio.NewReader(c)
	bw := bufio.NewWriter(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		p.requests.Add(1)
		c1, _ := p.byMethod.LoadOrStore(req.Method, new(atomic.Int64))
		c1.(*atomic.Int64).Add(1)
		p.mu.Lock()
		if p.arrivals != nil && len(p.arrivals) < 100000 {
			p.arrivals = append(p.arrivals, time.Now())
		}
		if id := req.Header.Get("X-Request-Id"); req.Method == http.MethodPost && id != "" {
			p.posts[id]++
			if p.posts[id] == 2 {
				p.dups++
			}
		}
		p.mu.Unlock()
		if req.Method == http.MethodConnect {
			p.tunnel(c, br, req.Host)
			return
		}
		size := p.Size
		if v := req.Header.Get("X-Size"); v != "" {
			size, _ = strconv.Atoi(v)
		}
		fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nCache-Control: no-store\r\nX-Parent: %s\r\nContent-Length: %d\r\n\r\n", p.Name, size)
		for n := size; n > 0; {
			k := min(n, len(body))
			bw.WriteString(body[:k])
			n -= k
		}
		if bw.Flush() != nil {
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
	for c := range p.conns {
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

// Restart ends a black hole and listens on the same address again.
func (p *Parent) Restart() error {
	p.mu.Lock()
	hole := p.hole
	p.hole = nil
	p.mu.Unlock()
	if hole != nil {
		hole()
	}
	var ln net.Listener
	var err error
	for i := 0; i < 100; i++ {
		if ln, err = net.Listen("tcp", p.Addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return err
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
	p.mu.Lock()
	hole := p.hole
	p.hole = nil
	p.mu.Unlock()
	if hole != nil {
		hole()
	}
}
