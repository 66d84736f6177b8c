package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The HTTP/1.1 engine through the real binary: framing, limits, timeouts
// and tunnels, each as a client or a parent would notice.

// scripted is a loopback parent whose every connection runs script.
type scripted struct {
	name, addr string
	mu         sync.Mutex
	conns      int
}

func newScripted(t *testing.T, name string, script func(c net.Conn, br *bufio.Reader)) *scripted {
	t.Helper()
	s := &scripted{name: name}
	s.addr = tcpServer(t, func(c net.Conn) {
		s.mu.Lock()
		s.conns++
		s.mu.Unlock()
		defer c.Close()
		br := bufio.NewReader(c)
		if _, err := br.Peek(1); err != nil {
			return // a probe
		}
		script(c, br)
	})
	return s
}

func (s *scripted) peerName() string { return s.name }
func (s *scripted) port() string     { _, p, _ := net.SplitHostPort(s.addr); return p }

// dial opens a raw client connection to peerd's proxy port.
func dialProxy(t *testing.T, p *peerd) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.proxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(15 * time.Second))
	return c, bufio.NewReader(c)
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("body: %v", err)
	}
	return string(b)
}

// directConfig is a direct proxy whose destination policy lets DIRECT
// requests and tunnels reach the tests' loopback origins, which the
// default policy (rightly) refuses.
const directConfig = `
[proxy]
listen = "127.0.0.1:0"
[admin]
listen = "127.0.0.1:0"
[access]
deny_to_local = false
connect_ports = ["1-65535"]
`

// TestPipelinedRequestsAnsweredInOrder: three requests in one write get
// three answers, in order, on the one connection.
func TestPipelinedRequestsAnsweredInOrder(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(100 * time.Millisecond)
		}
		io.WriteString(w, "answer "+r.URL.Path)
	})
	p := startPeerd(t, directConfig)
	c, br := dialProxy(t, p)
	var reqs strings.Builder
	for _, path := range []string{"/slow", "/b", "/c"} {
		fmt.Fprintf(&reqs, "GET http://%s%s HTTP/1.1\r\nHost: %s\r\n\r\n", origin, path, origin)
	}
	io.WriteString(c, reqs.String())
	for _, path := range []string{"/slow", "/b", "/c"} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if b := readBody(t, resp); b != "answer "+path {
			t.Fatalf("got %q; want the answer to %s (in order)", b, path)
		}
	}
}

// TestHTTP10Client: an HTTP/1.0 client gets a chunked answer unchunked and
// close-delimited, and keep-alive only when it asked for it.
func TestHTTP10Client(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/chunked" {
			io.WriteString(w, "part1 ")
			w.(http.Flusher).Flush()
			io.WriteString(w, "part2")
			return
		}
		w.Header().Set("Content-Length", "2")
		io.WriteString(w, "ok")
	})
	p := startPeerd(t, directConfig)
	c, _ := dialProxy(t, p)
	fmt.Fprintf(c, "GET http://%s/chunked HTTP/1.0\r\n\r\n", origin)
	raw, _ := io.ReadAll(c)
	if !strings.HasSuffix(string(raw), "\r\n\r\npart1 part2") || strings.Contains(string(raw), "Transfer-Encoding") {
		t.Fatalf("HTTP/1.0 answer:\n%s", raw)
	}
	c2, br := dialProxy(t, p)
	for i := 0; i < 2; i++ {
		fmt.Fprintf(c2, "GET http://%s/len HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", origin)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("keep-alive request %d: %v", i, err)
		}
		if b := readBody(t, resp); b != "ok" || resp.Header.Get("Connection") != "keep-alive" {
			t.Fatalf("keep-alive request %d: %q Connection=%q", i, b, resp.Header.Get("Connection"))
		}
	}
}

// TestInterimResponsesRelayed: a 103 Early Hints reaches an HTTP/1.1
// client before the final answer.
func TestInterimResponsesRelayed(t *testing.T) {
	t.Parallel()
	parent := newScripted(t, "a", func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ndone")
	})
	p := startPeerd(t, baseConfig+peerBlock("", parent))
	c, br := dialProxy(t, p)
	io.WriteString(c, "GET http://o.test/ HTTP/1.1\r\nHost: o.test\r\n\r\n")
	line, _ := br.ReadString('\n')
	if !strings.HasPrefix(line, "HTTP/1.1 103") {
		t.Fatalf("first line %q; want the 103", line)
	}
	for l, _ := br.ReadString('\n'); l != "\r\n"; l, _ = br.ReadString('\n') {
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 || readBody(t, resp) != "done" {
		t.Fatalf("final answer: %v %v", resp, err)
	}
}

// TestSlowloris: a client that sends one header byte every 200ms is cut
// at request_timeout with 408 and X-Peerd-Error, and the refusal is in the
// access log.
func TestSlowloris(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "access.log")
	p := startPeerd(t, withProxy(directConfig, "request_timeout = \"1s\"")+
		"[log]\naccess_log = \""+log+"\"\n")
	c, br := dialProxy(t, p)
	start := time.Now()
	go func() {
		for _, b := range []byte("GET http://o.test/ HTTP/1.1\r\nHost: o.test\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa") {
			if _, err := c.Write([]byte{b}); err != nil {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if resp.StatusCode != 408 || resp.Header.Get("X-Peerd-Error") == "" {
		t.Fatalf("%d %q; want 408 with X-Peerd-Error", resp.StatusCode, resp.Header.Get("X-Peerd-Error"))
	}
	if took < 900*time.Millisecond || took > 3*time.Second {
		t.Fatalf("cut after %v; want request_timeout (1s)", took)
	}
	waitFor(t, "refusal logged", 5*time.Second, func() bool {
		b, _ := os.ReadFile(log)
		return strings.Contains(string(b), "NONE_NONE/408")
	})
}

// TestRefusalsAreLogged: what the engine refuses before any handler runs
// (malformed heads, unsupported framing) carries X-Peerd-Error and leaves
// an access-log line.
func TestRefusalsAreLogged(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := filepath.Join(dir, "access.log")
	p := startPeerd(t, directConfig+"[log]\naccess_log = \""+log+"\"\n")
	for _, tc := range []struct{ req, want string }{
		{"GET http://o.test/ HTTP/1.1\nHost: o.test\n\n", "400"},
		{"GET http://o.test/ HTTP/1.9\r\nHost: o.test\r\n\r\n", "400"},
		{"get http://o.test/ HTTP/1.1\r\nHost: o.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "400"},
		{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nTransfer-Encoding: gzip\r\n\r\n", "501"},
	} {
		resp := raw(t, p, tc.req)
		if fmt.Sprint(resp.StatusCode) != tc.want || resp.Header.Get("X-Peerd-Error") == "" {
			t.Errorf("%q: %d %q; want %s with X-Peerd-Error", tc.req, resp.StatusCode, resp.Header.Get("X-Peerd-Error"), tc.want)
		}
	}
	waitFor(t, "refusals logged", 5*time.Second, func() bool {
		b, _ := os.ReadFile(log)
		return strings.Count(string(b), "NONE_NONE/400") == 3 && strings.Count(string(b), "NONE_NONE/501") == 1
	})
}

// TestClientIdleTimeout: an idle keep-alive client connection is closed.
func TestClientIdleTimeout(t *testing.T) {
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	p := startPeerd(t, withProxy(directConfig, "client_idle_timeout = \"500ms\""))
	c, br := dialProxy(t, p)
	fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", origin, origin)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	readBody(t, resp)
	start := time.Now()
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("read on idle connection: %v; want EOF", err)
	}
	if d := time.Since(start); d < 400*time.Millisecond || d > 3*time.Second {
		t.Fatalf("closed after %v; want client_idle_timeout (500ms)", d)
	}
}

// TestWriteTimeoutFreesTheSlot: a client that never reads a large answer
// is cut at write_timeout, and its parent's max_conn slot is freed.
func TestWriteTimeoutFreesTheSlot(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("z", 32<<20)
	parent := newScripted(t, "a", func(c net.Conn, br *bufio.Reader) {
		for {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(big))
			if _, err := io.WriteString(c, big); err != nil {
				return
			}
		}
	})
	p := startPeerd(t, withProxy(baseConfig, "write_timeout = \"1s\"")+peerBlock("max_conn = 1", parent))
	c, _ := dialProxy(t, p)
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetReadBuffer(4096)
	}
	io.WriteString(c, "GET http://o.test/big HTTP/1.1\r\nHost: o.test\r\n\r\n")
	waitFor(t, "the request in flight", 5*time.Second, func() bool { return p.peerInFlight("a") == 1 })
	waitFor(t, "the slot freed", 10*time.Second, func() bool { return p.peerInFlight("a") == 0 })
	// The slot is usable again.
	c2, br2 := dialProxy(t, p)
	io.WriteString(c2, "HEAD http://o.test/after HTTP/1.1\r\nHost: o.test\r\n\r\n")
	resp, err := http.ReadResponse(br2, &http.Request{Method: "HEAD"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the cut: %v %v", resp, err)
	}
}

func (p *peerd) peerInFlight(name string) int {
	var st struct {
		InFlight int `json:"in_flight"`
	}
	p.adminJSON("GET", "/peers/"+name, "", &st)
	return st.InFlight
}

// TestOversizedHeads: a request head over max_header_size gets 431; a
// parent's response head over it is a broken answer (502, and a GET is
// retried on the next parent); so is a CONNECT reply head over it.
func TestOversizedHeads(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("h", 8<<10)
	bloated := newScripted(t, "bloated", func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nX-Huge: %s\r\nContent-Length: 2\r\n\r\nno", huge)
	})
	good := newFakeParent(t, "good")
	// Answer failures off: the bloated answer to the GET would make the
	// parent suspect and send the POST to good; this test is about how
	// the POST itself fares on it.
	p := startPeerd(t, withProxy(baseConfig, "max_header_size = \"4KiB\"")+"\n[health]\nanswer_fail_limit = 0\n"+peerBlock("", bloated, good))
	resp := raw(t, p, "GET http://o.test/ HTTP/1.1\r\nHost: o.test\r\nX-Big: "+huge+"\r\n\r\n")
	if resp.StatusCode != 431 || resp.Header.Get("X-Peerd-Error") == "" {
		t.Fatalf("big request head: %d %q; want 431", resp.StatusCode, resp.Header.Get("X-Peerd-Error"))
	}
	if r := do(p.client(), "GET", "http://o.test/g", ""); r.String() != "200 from good" {
		t.Fatalf("GET with a bloated first parent: %s; want the next parent's answer", r)
	}
	if r := do(p.client(), "POST", "http://o.test/p", "x"); r.String() != "502 bad-gateway" {
		t.Fatalf("POST with a bloated first parent: %s; want 502 bad-gateway", r)
	}
}

// TestConnectReplyLimits: a parent's CONNECT reply head over
// max_header_size is a broken answer and is not relayed; its 1xx is never
// taken for the tunnel's start.
func TestConnectReplyLimits(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("h", 8<<10)
	bloated := newScripted(t, "bloated", func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nX-Huge: %s\r\n\r\n", huge)
		io.Copy(io.Discard, br)
	})
	interim := newScripted(t, "interim", func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 403 Forbidden\r\nContent-Length: 6\r\n\r\ndenied")
	})
	for _, tc := range []struct {
		parent *scripted
		want   int
	}{{bloated, 502}, {interim, 403}} {
		p := startPeerd(t, withProxy(baseConfig, "max_header_size = \"4KiB\"")+peerBlock("", tc.parent))
		resp := raw(t, p, "CONNECT o.test:443 HTTP/1.1\r\nHost: o.test:443\r\n\r\n")
		if resp.StatusCode != tc.want {
			t.Fatalf("%s: CONNECT got %d; want %d", tc.parent.name, resp.StatusCode, tc.want)
		}
	}
}

// TestConnectClientLeavesAtOnce: a client that gives up while a parent
// sits on its CONNECT releases the parent's slot at once, not after
// read_timeout.
func TestConnectClientLeavesAtOnce(t *testing.T) {
	silent := newScripted(t, "silent", func(c net.Conn, br *bufio.Reader) {
		http.ReadRequest(br)
		io.Copy(io.Discard, br) // never answers
	})
	p := startPeerd(t, baseConfig+peerBlock("", silent))
	c, _ := dialProxy(t, p)
	io.WriteString(c, "CONNECT o.test:443 HTTP/1.1\r\nHost: o.test:443\r\n\r\n")
	waitFor(t, "the CONNECT in flight", 5*time.Second, func() bool { return p.peerInFlight("silent") == 1 })
	c.Close()
	start := time.Now()
	waitFor(t, "the slot freed", 5*time.Second, func() bool { return p.peerInFlight("silent") == 0 })
	if d := time.Since(start); d > time.Second {
		t.Fatalf("slot freed %v after the client left; want at once", d)
	}
}

// TestTunnelIdleTimeout: a tunnel with no bytes either way for
// read_timeout is closed, both ways; one that keeps talking is not.
func TestTunnelIdleTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }() // echo
		}
	}()
	p := startPeerd(t, withProxy(directConfig, "read_timeout = \"1s\""))
	c, br := dialProxy(t, p)
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", ln.Addr(), ln.Addr())
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	// Busy for 2s (past read_timeout): still open.
	var start time.Time
	for i := 0; i < 8; i++ {
		if i > 0 {
			time.Sleep(250 * time.Millisecond)
		}
		io.WriteString(c, "ping\n")
		if l, err := br.ReadString('\n'); err != nil || l != "ping\n" {
			t.Fatalf("echo %d: %q %v", i, l, err)
		}
		start = time.Now()
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("idle tunnel sent a byte")
	}
	if d := time.Since(start); d < 800*time.Millisecond || d > 3*time.Second {
		t.Fatalf("idle tunnel closed after %v; want read_timeout (1s)", d)
	}
}

// TestMaxConnections: connections beyond max_connections are closed at
// once; the ones inside keep working.
func TestMaxConnections(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	p := startPeerd(t, withProxy(directConfig, "max_connections = 2"))
	c1, br1 := dialProxy(t, p)
	c2, _ := dialProxy(t, p)
	_ = c2
	fmt.Fprintf(c1, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", origin, origin)
	if resp, err := http.ReadResponse(br1, nil); err != nil || readBody(t, resp) != "ok" {
		t.Fatalf("first connection: %v", err)
	}
	_, br3 := dialProxy(t, p)
	if _, err := br3.ReadByte(); err == nil {
		t.Fatal("a third connection was served; want it closed at once")
	}
}

// TestAllDeadAnswersFast: three black-holed parents and a 1s connect
// timeout. The first request waits one connect timeout (every hop of a
// plan is dialled in parallel, none twice); every one after it is
// answered without a live connect, while the parents are suspect (no
// live request waits on a connect that hung) and once they are dead. A
// live connect to a black-holed parent costs its request the whole
// connect timeout: the count of live connects says whether one was made,
// and the time bound (half the connect timeout) is one no such request
// meets, however busy the machine.
func TestAllDeadAnswersFast(t *testing.T) {
	a, b, c := newFakeParent(t, "a"), newFakeParent(t, "b"), newFakeParent(t, "c")
	p := startPeerd(t, strings.Replace(baseConfig, `connect_timeout = "2s"`, `connect_timeout = "1s"`, 1)+health(3, "1m", "1m")+policy("round-robin")+peerBlock("", a, b, c))
	cl := p.client()
	for i := 0; i < 10; i++ {
		do(cl, "GET", "http://o.test/warm", "")
	}
	for _, f := range []*fakeParent{a, b, c} {
		f.stop()
		blackholeAt(t, f.addr)
	}
	cl.CloseIdleConnections()
	// liveConnects counts the connects requests made to the parents
	// (every connect but the probes').
	liveConnects := func() int {
		n := 0
		for _, name := range []string{"a", "b", "c"} {
			st := p.peer(name)
			n += st.ConnectsTotal - st.ProbesTotal
		}
		return n
	}
	const atOnce = 500 * time.Millisecond
	var first, slowest, lastDead time.Duration
	var before int
	for i := 0; i < 20; i++ {
		start := time.Now()
		r := do(cl, "GET", fmt.Sprintf("http://o.test/dead%d", i), "")
		d := time.Since(start)
		if r.status < 500 {
			t.Fatalf("request %d: %s", i, r)
		}
		if i == 0 {
			// The first request's connects have all ended: it was
			// answered when the last of them failed.
			first, before = d, liveConnects()
		} else {
			slowest = max(slowest, d)
			if n := liveConnects(); n != before {
				t.Fatalf("request %d: %d live connects to the parents after the first request's; want none (they hung, or are dead)", i, n-before)
			}
			if d > atOnce {
				t.Fatalf("request %d after the first timeout was paid: %v; want at once", i, d)
			}
		}
		if p.peer("a").State == "dead" && p.peer("b").State == "dead" && p.peer("c").State == "dead" {
			lastDead = d
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Its three connects run in parallel (50ms apart): about 1.1s. Dialled
	// one after another they would take 3s.
	if first > 1900*time.Millisecond {
		t.Fatalf("first answer after %v; want within about one connect timeout (1s), not one per parent", first)
	}
	for _, n := range []string{"a", "b", "c"} {
		if st := p.peer(n); st.State != "dead" {
			t.Fatalf("%s = %s after 20 requests; want dead", n, st.State)
		}
	}
	start := time.Now()
	r := do(cl, "GET", "http://o.test/after", "")
	d := time.Since(start)
	if r.code != "no-peers" || d > atOnce || liveConnects() != before {
		t.Fatalf("with every parent dead: %s after %v (last while dead %v), %d live connects; want 503 no-peers at once, none", r, d, lastDead, liveConnects()-before)
	}
	t.Logf("first %v; slowest after it %v; with every parent dead %v", first, slowest, d)
}
