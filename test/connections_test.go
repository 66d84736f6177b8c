package e2e

// What idle clients cost (issue 65), through the binary built without
// -race: a keep-alive connection between requests is parked (its buffers
// and its goroutine given back; it waits in peerd's own epoll set) and an
// idle CONNECT tunnel holds its two sockets and no pipe or goroutine (both
// its directions wait in the same set); both speak again without an
// error. Running out of
// descriptors is peerd's own failure: logged, counted, in /readyz, and
// never blamed on a parent.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/peerd/peerd/internal/testbed"
)

// openFiles is how many descriptors pid has open.
func openFiles(t *testing.T, pid int) int {
	t.Helper()
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// idleClient is one client connection the test keeps.
type idleClient struct {
	c  net.Conn
	br *bufio.Reader
}

func TestIdleClientsAndTunnelsCostLittle(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		io.WriteString(w, "ok")
	})
	echo := tcpServer(t, func(c net.Conn) { defer c.Close(); io.Copy(c, c) })
	cfg := strings.Replace(baseConfig, `direct = "never"`, `direct = "always"`, 1)
	cfg = strings.Replace(cfg, "[access]\n", "[access]\ndeny_to_local = false\n", 1)
	p := startPeerdBin(t, plainPeerdBin(t), cfg)
	pid := p.Cmd.Process.Pid
	// This process holds the clients' ends and the echo server's, peerd
	// two a tunnel: within the descriptor limit of wherever it runs.
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	n := min(1200, int(lim.Cur)/3-100)
	if n < 100 {
		t.Skipf("a descriptor limit of %d leaves too few for idle clients", lim.Cur)
	}
	sources := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}
	get := func(ic *idleClient, i int) error {
		ic.c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(ic.c, "GET http://%s/c%d HTTP/1.1\r\nHost: %s\r\n\r\n", origin, i, origin)
		resp, err := http.ReadResponse(ic.br, nil)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "ok" {
			return fmt.Errorf("%d %q", resp.StatusCode, b)
		}
		return nil
	}
	baseFiles, baseRSS := openFiles(t, pid), testbed.RSSMiB(pid)
	baseGoroutines := metricValue(p.adminMetrics(), "go_goroutines")
	clients := make([]*idleClient, n)
	for i := range clients {
		c, err := dialFrom(t, sources[i%len(sources)], p.proxy)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients[i] = &idleClient{c: c, br: bufio.NewReader(c)}
		if err := get(clients[i], i); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
	}
	// Parked once idle: give them time, then read what they cost.
	waitFor(t, "the idle connections' descriptors settled", 10*time.Second, func() bool {
		return openFiles(t, pid) <= baseFiles+n+32
	})
	// Parked, they wait in peerd's own epoll set: no goroutine each (a
	// goroutine's stack alone is 2 KiB).
	var goroutines float64
	waitFor(t, "the idle connections parked", 10*time.Second, func() bool {
		goroutines = metricValue(p.adminMetrics(), "go_goroutines")
		return goroutines >= 0 && goroutines < baseGoroutines+float64(n)/4
	})
	time.Sleep(time.Second) // (measured, not decided: the assertions are on counts)
	rss := testbed.RSSMiB(pid)
	t.Logf("%d idle keep-alive connections: %.1f KiB of RSS each (%.1f → %.1f MiB), %d descriptors (%d before), %.0f goroutines (%.0f before)",
		n, (rss-baseRSS)*1024/float64(n), baseRSS, rss, openFiles(t, pid), baseFiles, goroutines, baseGoroutines)
	for i, ic := range clients {
		if err := get(ic, n+i); err != nil {
			t.Fatalf("idle client %d speaking again: %v", i, err)
		}
	}
	for _, ic := range clients {
		ic.c.Close()
	}

	// Tunnels: two descriptors each, idle or not.
	baseFiles = openFiles(t, pid)
	tunnels := make([]*idleClient, n)
	for i := range tunnels {
		c, err := dialFrom(t, sources[i%len(sources)], p.proxy)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", echo, echo)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("tunnel %d: %v %v", i, resp, err)
		}
		tunnels[i] = &idleClient{c: c, br: br}
	}
	echoLine := func(tc *idleClient, i int) error {
		tc.c.SetDeadline(time.Now().Add(10 * time.Second))
		line := fmt.Sprintf("line %d\n", i)
		io.WriteString(tc.c, line)
		got, err := tc.br.ReadString('\n')
		if err != nil || got != line {
			return fmt.Errorf("%q %v", got, err)
		}
		return nil
	}
	for i, tc := range tunnels {
		if err := echoLine(tc, i); err != nil {
			t.Fatalf("tunnel %d: %v", i, err)
		}
	}
	// Idle, both directions of each wait in the epoll set: no goroutine.
	waitFor(t, "the idle tunnels' goroutines gone", 10*time.Second, func() bool {
		goroutines = metricValue(p.adminMetrics(), "go_goroutines")
		return goroutines >= 0 && goroutines < baseGoroutines+float64(n)/4
	})
	files := openFiles(t, pid)
	t.Logf("%d idle tunnels: %d descriptors (%d before), %.0f goroutines", n, files, baseFiles, goroutines)
	if per := float64(files-baseFiles) / float64(n); per > 2.1 {
		t.Fatalf("%.2f descriptors per idle tunnel; want 2 (its two sockets)", per)
	}
	for i, tc := range tunnels {
		if err := echoLine(tc, n+i); err != nil {
			t.Fatalf("idle tunnel %d speaking again: %v", i, err)
		}
	}
}

// TestOutOfDescriptorsIsPeerdsOwn: with a descriptor limit too low for
// the clients, tunnels fail with peerd's own 503 naming the limit, the
// parent is not blamed, and the failure is counted, logged and in
// /readyz.
func TestOutOfDescriptorsIsPeerdsOwn(t *testing.T) {
	t.Parallel()
	par := newFakeParent(t, "a")
	echo := tcpServer(t, func(c net.Conn) { defer c.Close(); io.Copy(c, c) })
	// A wrapper that lowers the limit before it runs peerd.
	wrap := filepath.Join(t.TempDir(), "peerd-lowfiles")
	os.WriteFile(wrap, []byte("#!/bin/sh\nulimit -n 96\nexec "+peerdBin+" \"$@\"\n"), 0o755)
	p := startPeerdBin(t, wrap, baseConfig+peerBlock("", par))
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	// Tunnels until one fails: with a descriptor short, the connect to
	// the parent fails (503 from peerd) or the accept does (no answer).
	failed := false
	for i := 0; i < 150 && !failed; i++ {
		c, err := net.Dial("tcp", p.proxy)
		if err != nil {
			break
		}
		held = append(held, c)
		c.SetDeadline(time.Now().Add(time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", echo, echo)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		switch {
		case err != nil:
			failed = true // not accepted
		case resp.StatusCode == 503:
			failed = true
			b, _ := io.ReadAll(resp.Body)
			if !strings.Contains(string(b)+resp.Header.Get("Proxy-Status"), "file descriptors") {
				t.Errorf("the 503 does not say peerd is out of file descriptors: %s %s", resp.Header.Get("Proxy-Status"), b)
			}
		case resp.StatusCode != 200:
			t.Fatalf("tunnel %d: %d", i, resp.StatusCode)
		}
	}
	if !failed {
		t.Fatal("150 tunnels opened at a limit of 96 descriptors")
	}
	// Out of descriptors, the admin API cannot take a connection either
	// (a balancer's check then fails, which is the truth); once some
	// close, /readyz says why for a while.
	for _, c := range held {
		c.Close()
	}
	held = nil
	if !strings.Contains(p.Logs(), "out of file descriptors") {
		t.Fatal("no log line says peerd ran out of file descriptors")
	}
	if v := labelledValue(p.adminMetrics(), regexp.MustCompile(`^peerd_descriptors_exhausted_total\{where="(connect|accept)"\}`)); v <= 0 {
		t.Fatalf("peerd_descriptors_exhausted_total = %v; want the failures counted", v)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + p.admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(b), "out of file descriptors") {
		t.Fatalf("/readyz: %d %s; want 503 saying peerd is out of descriptors", resp.StatusCode, b)
	}
	if st := p.peer("a"); st.State != "alive" {
		t.Fatalf("the parent is %s: peerd's own limit was blamed on it", st.State)
	}
}

// TestParkedConnectionsAcrossAStop: at SIGTERM, keep-alive connections
// idle long enough to be parked (in peerd's own epoll set) are kept for
// shutdown_idle_grace: one that speaks within it is answered with
// Connection: close, one that stays silent is closed at the grace's end,
// and peerd exits 0.
func TestParkedConnectionsAcrossAStop(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	p := startPeerd(t, withProxy(directConfig, "shutdown_idle_grace = \"3s\"\nclient_idle_timeout = \"1m\"\nshutdown_timeout = \"30s\""))
	get := func(c net.Conn, br *bufio.Reader) *http.Response {
		t.Helper()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", origin, origin)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || string(b) != "ok" {
			t.Fatalf("%d %q", resp.StatusCode, b)
		}
		resp.Body.Close()
		return resp
	}
	speaker, sbr := dialProxy(t, p)
	quiet, qbr := dialProxy(t, p)
	get(speaker, sbr)
	get(quiet, qbr)
	// Parked after 200 ms idle: their waits are in the set (the test's
	// assertions hold parked or not; this only makes them about parking).
	time.Sleep(600 * time.Millisecond)
	p.signal(syscall.SIGTERM)
	stopped := time.Now()
	waitFor(t, "the stop to begin (the listener closed)", 5*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", p.proxy, time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
	if resp := get(speaker, sbr); !resp.Close {
		t.Fatal("a parked connection's request during the stop was not answered with Connection: close")
	}
	quiet.SetReadDeadline(time.Now().Add(15 * time.Second))
	if _, err := qbr.ReadByte(); err != io.EOF {
		t.Fatalf("the silent parked connection: read %v; want EOF at the grace's end", err)
	}
	if d := time.Since(stopped); d < 2*time.Second || d > 8*time.Second {
		t.Fatalf("the silent parked connection closed %v after the stop; want at the 3s grace's end (shutdown_timeout is 30s)", d)
	}
	p.exitsZero(15 * time.Second)
}

// TestIdleTunnelAcrossAStop: at SIGTERM, a tunnel idle long enough for
// both its directions to wait in peerd's epoll set still carries bytes
// while shutdown_timeout lasts, is closed when it runs out, is logged
// once with its bytes, and peerd exits 0.
func TestIdleTunnelAcrossAStop(t *testing.T) {
	t.Parallel()
	echo := tcpServer(t, func(c net.Conn) { defer c.Close(); io.Copy(c, c) })
	cfg := strings.Replace(baseConfig, `direct = "never"`, `direct = "always"`, 1)
	cfg = strings.Replace(cfg, "[access]\n", "[access]\ndeny_to_local = false\n", 1)
	p := startPeerd(t, withProxy(cfg, "shutdown_timeout = \"3s\""))
	c, br := dialProxy(t, p)
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", echo, echo)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	echoLine := func(line string) {
		t.Helper()
		io.WriteString(c, line)
		if got, err := br.ReadString('\n'); err != nil || got != line {
			t.Fatalf("through the tunnel: %q %v; want %q", got, err, line)
		}
	}
	echoLine("before\n")
	// Idle past 200 ms: both directions wait in the set (the assertions
	// hold either way; this only makes them about an idle tunnel).
	time.Sleep(600 * time.Millisecond)
	echoLine("after an idle while\n")
	time.Sleep(600 * time.Millisecond)
	p.signal(syscall.SIGTERM)
	stopped := time.Now()
	echoLine("during the stop\n")
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("the idle tunnel at the stop: read %v; want EOF when shutdown_timeout (3s) ran out", err)
	}
	if d := time.Since(stopped); d < 2*time.Second || d > 10*time.Second {
		t.Fatalf("the tunnel was closed %v after the stop; want at shutdown_timeout (3s)", d)
	}
	p.exitsZero(15 * time.Second)
	var line string
	waitFor(t, "the tunnel's access-log line", 5*time.Second, func() bool {
		b, _ := os.ReadFile(p.accessLog)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "CONNECT "+echo) {
				if line != "" {
					t.Fatalf("the tunnel was logged twice:\n%s\n%s", line, l)
				}
				line = l
			}
		}
		return line != ""
	})
	// Squid's format: the fifth field is the bytes the client got.
	sent := len("before\n" + "after an idle while\n" + "during the stop\n")
	f := strings.Fields(line)
	if len(f) < 5 {
		t.Fatalf("access log %q: not Squid's format", line)
	}
	if n, err := strconv.Atoi(f[4]); err != nil || n < sent {
		t.Fatalf("access log %q: want the %d bytes the tunnel carried to the client counted", line, sent)
	}
}
