// Package e2e runs the real peerd binary against loopback fake parents
// (which record every connection and can inject faults) and real Squid.
package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/peerd/peerd/internal/blackhole"
)

var peerdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "peerd-e2e")
	if err != nil {
		panic(err)
	}
	peerdBin = filepath.Join(dir, "peerd")
	build := exec.Command("go", "build", "-race", "-o", peerdBin, "../cmd/peerd")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building peerd:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// ---------------------------------------------------------------- peerd

// peerd is a running peerd process.
type peerd struct {
	t      testing.TB
	cmd    *exec.Cmd
	dir    string
	config string
	proxy  string // host:port
	admin  string
	logMu  sync.Mutex
	log    bytes.Buffer
	exited chan struct{}
	err    error
}

// The "peerd serving" line, in text or JSON format, and its addresses.
var (
	servingLine = regexp.MustCompile(`msg"?[=:]"peerd serving"`)
	adminAddr   = regexp.MustCompile(`\badmin"?[=:]"?([0-9.:\[\]]+)`)
	proxyAddr   = regexp.MustCompile(`\bproxy"?[=:]"?([0-9.:\[\]]+)`)
)

// startPeerd writes config to a file and runs peerd on it. Listen
// addresses default to loopback port 0; the real ports come from the
// "peerd serving" log line.
func startPeerd(t testing.TB, config string) *peerd {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "peerd.toml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &peerd{t: t, dir: dir, config: path, exited: make(chan struct{})}
	p.cmd = exec.Command(peerdBin, "-config", path)
	// The binary is built with -race: no 1s sleep at exit, and races are
	// reported in its log, which fails the test below.
	p.cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	stderr, _ := p.cmd.StderrPipe()
	p.cmd.Stdout = io.Discard
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			p.logMu.Lock()
			p.log.WriteString(line + "\n")
			p.logMu.Unlock()
			if servingLine.MatchString(line) {
				a, x := adminAddr.FindStringSubmatch(line), proxyAddr.FindStringSubmatch(line)
				once.Do(func() {
					if a != nil && x != nil {
						p.admin, p.proxy = a[1], x[1]
					}
					close(ready)
				})
			}
		}
	}()
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.stop()
		if strings.Contains(p.logs(), "DATA RACE") {
			t.Error("the race detector reported a data race in peerd")
		}
		if t.Failed() {
			t.Logf("peerd log:\n%s", p.logs())
		}
	})
	select {
	case <-ready:
	case <-p.exited:
		t.Fatalf("peerd exited before serving: %v\n%s", p.err, p.logs())
	case <-time.After(30 * time.Second):
		t.Fatalf("peerd not serving after 30s\n%s", p.logs())
	}
	return p
}

func (p *peerd) logs() string {
	p.logMu.Lock()
	defer p.logMu.Unlock()
	return p.log.String()
}

func (p *peerd) signal(s os.Signal) { p.cmd.Process.Signal(s) }

func (p *peerd) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// client returns an HTTP client that uses peerd as its proxy.
func (p *peerd) client() *http.Client {
	u, _ := url.Parse("http://" + p.proxy)
	return &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyURL(u), MaxIdleConnsPerHost: 16},
		Timeout:   20 * time.Second,
	}
}

// peerStatus is the part of PEER the tests read.
type peerStatus struct {
	Name                 string     `json:"name"`
	State                string     `json:"state"`
	AdminState           string     `json:"admin_state"`
	Weight               int        `json:"weight"`
	ConsecutiveFailures  int        `json:"consecutive_failures"`
	ConnectFailuresTotal int        `json:"connect_failures_total"`
	ConnectsTotal        int        `json:"connects_total"`
	RequestsTotal        int        `json:"requests_total"`
	ProbesTotal          int        `json:"probes_total"`
	ProbeFailuresTotal   int        `json:"probe_failures_total"`
	DeathsTotal          int        `json:"deaths_total"`
	RevivalsTotal        int        `json:"revivals_total"`
	DeadSince            *time.Time `json:"dead_since"`
	LastError            *string    `json:"last_error"`
	Suspect              bool       `json:"suspect"`
}

func (p *peerd) peer(name string) peerStatus {
	p.t.Helper()
	var st peerStatus
	p.adminJSON("GET", "/peers/"+name, "", &st)
	return st
}

func (p *peerd) adminJSON(method, path, token string, v any) int {
	p.t.Helper()
	req, _ := http.NewRequest(method, "http://"+p.admin+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatalf("admin %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if v != nil {
		json.NewDecoder(resp.Body).Decode(v)
	}
	return resp.StatusCode
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ------------------------------------------------------------ fake parent

// connRecord is what a fake parent saw on one connection.
type connRecord struct {
	at       time.Time
	bytes    int
	requests int
	methods  []string
}

// fakeParent is a loopback HTTP proxy that answers every request itself and
// records every connection, so tests can tell probes (no bytes) from
// requests. Its behaviour is switchable for fault injection.
type fakeParent struct {
	t    testing.TB
	name string
	addr string

	mu      sync.Mutex
	ln      net.Listener
	conns   []*connRecord
	mode    string // "" normal; see serveConn
	status  int
	open    map[net.Conn]bool
	stopped bool
}

func newFakeParent(t testing.TB, name string) *fakeParent {
	t.Helper()
	f := &fakeParent{t: t, name: name, open: map[net.Conn]bool{}, status: 200}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	f.serve(ln)
	t.Cleanup(f.stop)
	return f
}

func (f *fakeParent) port() string { _, p, _ := net.SplitHostPort(f.addr); return p }

func (f *fakeParent) serve(ln net.Listener) {
	f.mu.Lock()
	f.ln, f.stopped = ln, false
	f.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			rec := &connRecord{at: time.Now()}
			f.mu.Lock()
			f.conns = append(f.conns, rec)
			f.open[c] = true
			f.mu.Unlock()
			go f.serveConn(c, rec)
		}
	}()
}

// stop closes the listener and every open connection: the port refuses.
func (f *fakeParent) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return
	}
	f.stopped = true
	f.ln.Close()
	for c := range f.open {
		c.Close()
	}
}

// restart listens again on the same port.
func (f *fakeParent) restart() {
	f.t.Helper()
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ {
		if ln, err = net.Listen("tcp", f.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		f.t.Fatalf("restart %s: %v", f.name, err)
	}
	f.serve(ln)
}

func (f *fakeParent) setMode(m string) {
	f.mu.Lock()
	f.mode = m
	f.mu.Unlock()
}

func (f *fakeParent) setStatus(s int) {
	f.mu.Lock()
	f.status = s
	f.mu.Unlock()
}

// records returns a copy of the connection records.
func (f *fakeParent) records() []connRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]connRecord, len(f.conns))
	for i, c := range f.conns {
		out[i] = *c
		out[i].methods = append([]string(nil), c.methods...)
	}
	return out
}

// requests counts requests received (optionally of one method).
func (f *fakeParent) requests(method string) int {
	n := 0
	for _, r := range f.records() {
		for _, m := range r.methods {
			if method == "" || m == method {
				n++
			}
		}
	}
	return n
}

type countingReader struct {
	r   io.Reader
	rec *connRecord
	mu  *sync.Mutex
}

func (c countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.mu.Lock()
	c.rec.bytes += n
	c.mu.Unlock()
	return n, err
}

func (f *fakeParent) serveConn(c net.Conn, rec *connRecord) {
	defer func() {
		c.Close()
		f.mu.Lock()
		delete(f.open, c)
		f.mu.Unlock()
	}()
	br := bufio.NewReader(countingReader{r: c, rec: rec, mu: &f.mu})
	f.mu.Lock()
	mode := f.mode
	f.mu.Unlock()
	if mode == "close-at-once" { // accept, then close without reading
		return
	}
	for served := 0; ; served++ {
		if mode == "idle-close" { // keep-alive connections die after 1s idle
			c.SetReadDeadline(time.Now().Add(time.Second))
		}
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if mode == "stale-second" && served > 0 {
			// The keep-alive race: the peer closed the connection just as
			// our request arrived. It is not processed, and not recorded.
			c.(*net.TCPConn).SetLinger(0)
			return
		}
		body, _ := io.ReadAll(req.Body)
		f.mu.Lock()
		rec.requests++
		rec.methods = append(rec.methods, req.Method)
		status := f.status
		f.mu.Unlock()
		switch mode {
		case "reset-after-read": // read the request, then reset
			c.(*net.TCPConn).SetLinger(0)
			return
		case "half-headers": // half a response, then reset
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Ty")
			c.(*net.TCPConn).SetLinger(0)
			return
		case "hang": // headers, then nothing
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
			time.Sleep(time.Hour)
			return
		case "silent": // read the request, never answer
			time.Sleep(time.Hour)
			return
		}
		if req.Method == http.MethodConnect {
			if mode == "deny-connect" {
				io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 6\r\n\r\ndenied")
				return
			}
			f.serveConnect(c, br, req)
			return
		}
		if status == 200 && strings.Contains(req.Header.Get("Cache-Control"), "only-if-cached") {
			status = http.StatusGatewayTimeout // a sibling with nothing cached
		}
		resp := fmt.Sprintf("from %s: %s %s body=%d xff=%s via=%s auth=%s", f.name, req.Method, req.RequestURI,
			len(body), req.Header.Get("X-Forwarded-For"), req.Header.Get("Via"), req.Header.Get("Proxy-Authorization"))
		fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nX-Parent: %s\r\n\r\n%s",
			status, http.StatusText(status), len(resp), f.name, resp)
		if mode == "close-after-response" {
			return
		}
	}
}

// serveConnect tunnels to the requested target.
func (f *fakeParent) serveConnect(c net.Conn, br *bufio.Reader, req *http.Request) {
	up, err := net.Dial("tcp", req.Host)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer up.Close()
	io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	go func() { io.Copy(up, br); up.(*net.TCPConn).CloseWrite() }()
	io.Copy(c, up)
}

// blackhole returns a loopback address whose accept queue is full: SYNs
// to it are dropped, so connects time out (like a host that vanished).
// blackholeAt black-holes a loopback address until release is called or
// the test ends.
func blackholeAt(t testing.TB, at string) (release func()) {
	t.Helper()
	release, err := blackhole.At(at)
	if errors.Is(err, blackhole.ErrNotFull) {
		t.Skip("cannot make a black-holed listener here (accept queue never fills)")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return release
}

// ---------------------------------------------------------------- origin

// newOrigin starts a loopback origin server.
func newOrigin(t testing.TB, h http.HandlerFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// loopbackPeer is anything a test runs on loopback as a peer of peerd:
// a fake parent or a real Squid.
type loopbackPeer interface {
	peerName() string
	port() string
}

func (f *fakeParent) peerName() string { return f.name }

// peerBlock renders one [[peer]] table per peer, each with extra keys.
func peerBlock(extra string, ps ...loopbackPeer) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "[[peer]]\nname = %q\nhost = \"127.0.0.1\"\nport = %s\n%s\n", p.peerName(), p.port(), extra)
	}
	return b.String()
}

const baseConfig = `
[proxy]
listen = "127.0.0.1:0"
name = "peerd"
connect_timeout = "2s"
direct = "never"
[admin]
listen = "127.0.0.1:0"
token = "secret"
[log]
level = "debug"
[access]
connect_ports = ["1-65535"]
`
