// Package e2e runs the real peerd binary against loopback fake parents
// (which record every connection and can inject faults) and real Squid.
package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peerd/peerd/internal/blackhole"
	"github.com/peerd/peerd/internal/testbed"
)

var peerdBin string

// plain is peerd built without -race, for tests that measure its memory
// (the detector's shadow memory is not peerd's): built once, when first
// asked for.
var plain struct {
	once sync.Once
	bin  string
	err  error
	dir  string
}

// plainPeerdBin is the path of peerd built without -race.
func plainPeerdBin(t testing.TB) string {
	t.Helper()
	plain.once.Do(func() {
		plain.bin = filepath.Join(plain.dir, "peerd-plain")
		if out, err := exec.Command("go", "build", "-o", plain.bin, "../cmd/peerd").CombinedOutput(); err != nil {
			plain.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if plain.err != nil {
		t.Fatal(plain.err)
	}
	return plain.bin
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "peerd-e2e")
	if err != nil {
		panic(err)
	}
	plain.dir = dir
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

// peerd is a running peerd process (testbed.Peerd) tied to a test.
type peerd struct {
	*testbed.Peerd
	t         testing.TB
	accessLog string    // the access log (one is added when the config has none)
	rec       *recorder // what the test got through client()
	dir       string
	config    string
	proxy     string // host:port
	admin     string
	exited    <-chan struct{}
}

// startPeerd writes config to a file and runs peerd on it. Listen
// addresses default to loopback port 0; the real ports come from the
// "peerd serving" log line. The binary is built with -race (and races are
// reported in its log, which fails the test).
func startPeerd(t testing.TB, config string) *peerd {
	t.Helper()
	return startPeerdBin(t, peerdBin, config)
}

// startPeerdBin is startPeerd with another build of peerd.
func startPeerdBin(t testing.TB, bin, config string) *peerd {
	t.Helper()
	config, accessLog := withSuiteAccessLog(t, config)
	tp, err := testbed.StartPeerd(bin, t.TempDir(), config, "GORACE=atexit_sleep_ms=0")
	if err != nil {
		t.Fatal(err)
	}
	p := &peerd{Peerd: tp, t: t, dir: tp.Dir, config: tp.Config, proxy: tp.Proxy, admin: tp.Admin, exited: tp.Exited(),
		accessLog: accessLog, rec: &recorder{}}
	t.Cleanup(func() {
		p.Stop()
		checkAgreement(t, p.accessLog, p.rec)
		if strings.Contains(p.Logs(), "DATA RACE") {
			t.Error("the race detector reported a data race in peerd")
		}
		if t.Failed() {
			t.Logf("peerd log:\n%s", p.Logs())
		}
	})
	return p
}

func (p *peerd) logs() string       { return p.Logs() }
func (p *peerd) signal(s os.Signal) { p.Signal(s) }
func (p *peerd) stop()              { p.Stop() }

// exitsZero waits up to within for peerd to exit, and fails unless it
// exited 0.
func (p *peerd) exitsZero(within time.Duration) {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(within):
		p.t.Fatal("peerd did not exit")
	}
	if err := p.Err(); err != nil {
		p.t.Fatalf("exit: %v; want 0", err)
	}
}

// client returns an HTTP client that uses peerd as its proxy.
func (p *peerd) client() *http.Client {
	u, _ := url.Parse("http://" + p.proxy)
	rt := &recordingTransport{base: &http.Transport{Proxy: http.ProxyURL(u), MaxIdleConnsPerHost: 16}, rec: p.rec}
	return &http.Client{Transport: rt, Timeout: 20 * time.Second}
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
	ProxyOnly            bool       `json:"proxy_only"`
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

// fakeParent is a loopback parent (testbed.Parent) tied to a test: it
// records every connection, so tests can tell probes (no bytes) from
// requests, and can inject faults.
type fakeParent struct {
	*testbed.Parent
	t    testing.TB
	name string
	addr string
}

func newFakeParent(t testing.TB, name string) *fakeParent {
	t.Helper()
	p, err := testbed.NewParent(name, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return &fakeParent{Parent: p, t: t, name: name, addr: p.Addr}
}

func (f *fakeParent) port() string { return f.Port() }

// stop closes the listener and every open connection: the port refuses.
func (f *fakeParent) stop() { f.Kill() }

// restart listens again on the same port.
func (f *fakeParent) restart() {
	f.t.Helper()
	if err := f.Restart(); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeParent) setMode(m string)              { f.SetMode(m) }
func (f *fakeParent) setStatus(s int)               { f.SetStatus(s) }
func (f *fakeParent) records() []testbed.ConnRecord { return f.Records() }

// requests counts requests received (optionally of one method).
func (f *fakeParent) requests(method string) int { return f.RequestsOf(method) }

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

// ------------------------------------------------------------- configs

// withProxy adds lines to a config's [proxy] table.
func withProxy(cfg string, lines ...string) string {
	return strings.Replace(cfg, "[proxy]\n", "[proxy]\n"+strings.Join(lines, "\n")+"\n", 1)
}

// health is a [health] table: the fail limit and the probe intervals.
func health(limit int, interval, maxInterval string) string {
	return fmt.Sprintf("\n[health]\nconnect_fail_limit = %d\nprobe_interval = %q\nprobe_max_interval = %q\n", limit, interval, maxInterval)
}

// policy is a [selection] table.
func policy(name string) string { return fmt.Sprintf("[selection]\npolicy = %q\n", name) }

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

// tcpServer serves every connection to a loopback port with serve (each
// on its own goroutine) until the test ends, and returns the address.
func tcpServer(t testing.TB, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return ln.Addr().String()
}

// ruleRef is how a refusal names the nth [[rule]] (from 1) of p's config
// file: "[[rule]] #n, peerd.toml line L".
func (p *peerd) ruleRef(n int) string {
	p.t.Helper()
	b, err := os.ReadFile(p.config)
	if err != nil {
		p.t.Fatal(err)
	}
	seen := 0
	for i, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) == "[[rule]]" {
			if seen++; seen == n {
				return fmt.Sprintf("[[rule]] #%d, %s line %d", n, filepath.Base(p.config), i+1)
			}
		}
	}
	p.t.Fatalf("%s has no [[rule]] #%d", p.config, n)
	return ""
}
