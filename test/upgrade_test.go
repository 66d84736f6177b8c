package e2e

// Binary upgrades through the binary (issue 26): SIGUSR2 under load hands
// the sockets to the new file at the same path; nothing is refused or
// lost; a new binary that cannot start leaves the old one serving.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// upgradable is a peerd started from its own copy of the binary, with its
// stderr on a pipe the test holds (so that the process that takes over
// can keep logging after the first one exits).
type upgradable struct {
	t       *testing.T
	bin     string
	pidFile string
	cmd     *exec.Cmd
	proxy   string
	admin   string
	mu      sync.Mutex
	log     bytes.Buffer
	exited  chan struct{}
}

var servingRe = regexp.MustCompile(`msg="peerd serving" admin="?([0-9.:]+)"? .*pid=(\d+) proxy="?([0-9.:]+)"?`)

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	tmp := to + ".new"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, to); err != nil { // a new file at the path, as a package upgrade does
		t.Fatal(err)
	}
}

func startUpgradable(t *testing.T, config string) *upgradable {
	t.Helper()
	dir := t.TempDir()
	u := &upgradable{t: t, bin: filepath.Join(dir, "peerd"), pidFile: filepath.Join(dir, "peerd.pid"), exited: make(chan struct{})}
	copyFile(t, peerdBin, u.bin)
	config = strings.Replace(config, "[proxy]\n", fmt.Sprintf("[proxy]\npid_file = %q\n", u.pidFile), 1)
	cfgPath := filepath.Join(dir, "peerd.toml")
	os.WriteFile(cfgPath, []byte(config), 0o644)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	u.cmd = exec.Command(u.bin, "-config", cfgPath)
	u.cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	// Both on files: a pipe exec made would keep Wait waiting for the
	// process that took over (it inherits stdout and stderr).
	u.cmd.Stderr, u.cmd.Stdout = w, w
	if err := u.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	go func() { u.cmd.Wait(); close(u.exited) }()
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			u.mu.Lock()
			u.log.WriteString(sc.Text() + "\n")
			u.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		// Whoever serves at the end (the first process or the one that
		// took over) is stopped.
		for _, pid := range []int{u.cmd.Process.Pid, u.servingPID()} {
			if pid > 0 {
				syscall.Kill(pid, syscall.SIGTERM)
			}
		}
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) && syscall.Kill(u.servingPID(), 0) == nil {
			if pid := u.servingPID(); pid == u.cmd.Process.Pid {
				select {
				case <-u.exited: // reaped: gone
					deadline = time.Now()
					continue
				default:
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		r.Close()
		if strings.Contains(u.logs(), "DATA RACE") {
			t.Error("the race detector reported a data race in peerd")
		}
		if t.Failed() {
			t.Logf("peerd log:\n%s", u.logs())
		}
	})
	waitFor(t, "peerd serving", 30*time.Second, func() bool {
		m := servingRe.FindStringSubmatch(u.logs())
		if m == nil {
			return false
		}
		u.admin, u.proxy = m[1], m[3]
		return true
	})
	return u
}

func (u *upgradable) logs() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.log.String()
}

// servingPID is the PID in the pid file (the process that serves).
func (u *upgradable) servingPID() int {
	b, _ := os.ReadFile(u.pidFile)
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// slowOrigin serves /big/N: N MiB of a fixed pattern, written as fast as
// the client reads; /small: a short answer.
func slowOrigin(t *testing.T) string {
	return newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/big/")); err == nil {
			w.Header().Set("Content-Length", strconv.Itoa(n<<20))
			chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
			for i := 0; i < n*16; i++ {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			return
		}
		io.WriteString(w, "small "+r.URL.Path)
	})
}

// echoServer answers each line with the same line.
func echoServer(t *testing.T) string {
	return tcpServer(t, func(c net.Conn) { defer c.Close(); io.Copy(c, c) })
}

const upgradeConfig = `
[proxy]
listen = "127.0.0.1:0"
name = "peerd"
direct = "always"
shutdown_timeout = "30s"
[admin]
listen = "127.0.0.1:0"
token = "secret"
[access]
deny_to_local = false
connect_ports = ["1-65535"]
[cache]
memory = "0"
`

func TestBinaryUpgradeUnderLoad(t *testing.T) {
	origin := slowOrigin(t)
	echo := echoServer(t)
	u := startUpgradable(t, upgradeConfig)
	oldPID := u.cmd.Process.Pid
	proxyURL, _ := url.Parse("http://" + u.proxy)

	// Clients on reused connections and on new ones, bounded in count.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var oks, fails atomic.Int64
	var firstFail atomic.Value
	for w := 0; w < 4; w++ {
		reuse := w%2 == 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := &http.Transport{Proxy: http.ProxyURL(proxyURL), DisableKeepAlives: !reuse}
			defer tr.CloseIdleConnections()
			cl := &http.Client{Transport: tr, Timeout: 20 * time.Second}
			for i := 0; i < 2000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := cl.Get(fmt.Sprintf("http://%s/small/%d", origin, i))
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if err != nil || resp.StatusCode != 200 {
					fails.Add(1)
					firstFail.CompareAndSwap(nil, fmt.Sprint(err, resp))
				} else {
					oks.Add(1)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	// Two downloads of 32 MiB, read slowly (about 8 MiB/s).
	want := sha256.Sum256(bytes.Repeat(bytes.Repeat([]byte("0123456789abcdef"), 4096), 32*16))
	downloads := make(chan string, 2)
	for d := 0; d < 2; d++ {
		go func() {
			cl := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 60 * time.Second}
			resp, err := cl.Get(fmt.Sprintf("http://%s/big/32", origin))
			if err != nil {
				downloads <- err.Error()
				return
			}
			defer resp.Body.Close()
			h := sha256.New()
			buf := make([]byte, 64<<10)
			for {
				n, err := resp.Body.Read(buf)
				h.Write(buf[:n])
				if err == io.EOF {
					break
				}
				if err != nil {
					downloads <- err.Error()
					return
				}
				time.Sleep(8 * time.Millisecond)
			}
			if got := h.Sum(nil); !bytes.Equal(got, want[:]) {
				downloads <- "corrupt download"
				return
			}
			downloads <- "ok"
		}()
	}
	// A tunnel exchanging lines before, during and after.
	tc, err := net.Dial("tcp", u.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	fmt.Fprintf(tc, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", echo, echo)
	tbr := bufio.NewReader(tc)
	if resp, err := http.ReadResponse(tbr, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	exchange := func(i int) {
		t.Helper()
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(tc, "line %d\n", i)
		if l, err := tbr.ReadString('\n'); err != nil || l != fmt.Sprintf("line %d\n", i) {
			t.Fatalf("tunnel exchange %d: %q %v", i, l, err)
		}
	}
	exchange(0)

	time.Sleep(300 * time.Millisecond) // the load and the downloads under way
	copyFile(t, peerdBin, u.bin)       // the package manager drops a new binary in place
	if err := u.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new process serving", 30*time.Second, func() bool {
		pid := u.servingPID()
		return pid != 0 && pid != oldPID && strings.Count(u.logs(), `msg="peerd serving"`) >= 2
	})
	// The tunnel and the downloads belong to the old process, which
	// finishes them before it exits.
	exchange(1)
	exchange(2)
	tc.Close() // the tunnel's end
	for d := 0; d < 2; d++ {
		if got := <-downloads; got != "ok" {
			t.Errorf("download %d: %s", d, got)
		}
	}
	select {
	case <-u.exited:
	case <-time.After(40 * time.Second):
		t.Fatal("the old process did not exit after the hand-over")
	}
	close(stop)
	wg.Wait()
	if n := fails.Load(); n != 0 {
		t.Errorf("%d of %d requests failed across the upgrade (first: %v)", n, n+oks.Load(), firstFail.Load())
	}
	newPID := u.servingPID()
	if newPID == oldPID || syscall.Kill(newPID, 0) != nil {
		t.Fatalf("pid file names %d (old %d); want a live new process", newPID, oldPID)
	}
	// The proxy port is the new process's now.
	cl := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + origin + "/small/after")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the upgrade: %v %v", resp, err)
	}
	resp.Body.Close()
	t.Logf("%d requests across the upgrade, 0 failed; old pid %d, new pid %d", oks.Load(), oldPID, newPID)
}

func TestBinaryUpgradeFailsOldKeepsServing(t *testing.T) {
	origin := slowOrigin(t)
	u := startUpgradable(t, upgradeConfig)
	// The new "binary" exits at once.
	os.WriteFile(u.bin+".new", []byte("#!/bin/sh\necho 'broken build' >&2\nexit 3\n"), 0o755)
	os.Rename(u.bin+".new", u.bin)
	u.cmd.Process.Signal(syscall.SIGUSR2)
	waitFor(t, "the failed upgrade logged", 40*time.Second, func() bool {
		return strings.Contains(u.logs(), "binary upgrade failed; this process keeps serving")
	})
	proxyURL, _ := url.Parse("http://" + u.proxy)
	cl := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + origin + "/small/still")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after a failed upgrade: %v %v", resp, err)
	}
	resp.Body.Close()
	select {
	case <-u.exited:
		t.Fatal("the old process exited after a failed upgrade")
	default:
	}
	if pid := u.servingPID(); pid != u.cmd.Process.Pid {
		t.Fatalf("pid file names %d; want the old process %d", pid, u.cmd.Process.Pid)
	}
}

// TestSystemdUnitVerifies: etc/peerd.service passes systemd-analyze
// verify (with the binary at the test's path).
func TestSystemdUnitVerifies(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	b, err := os.ReadFile("../etc/peerd.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(t.TempDir(), "peerd.service")
	os.WriteFile(unit, []byte(strings.ReplaceAll(string(b), "/usr/local/bin/peerd", peerdBin)), 0o644)
	// Documentation= names the manual pages: verify finds them where
	// make install puts them (MANPATH, here the test's own tree).
	man := t.TempDir()
	for src, dst := range map[string]string{"../man/peerd.8": "man8/peerd.8", "../man/peerd.toml.5": "man5/peerd.toml.5"} {
		page, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Dir(filepath.Join(man, dst)), 0o755)
		os.WriteFile(filepath.Join(man, dst), page, 0o644)
	}
	cmd := exec.Command(sa, "verify", unit)
	cmd.Env = append(os.Environ(), "MANPATH="+man)
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), "peerd.service") {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	if !strings.Contains(string(b), "Type=notify") || !strings.Contains(string(b), "NotifyAccess=all") {
		t.Fatal("the unit must let systemd follow the new main process after SIGUSR2 (Type=notify, NotifyAccess=all)")
	}
}

// TestStateFileAcrossRestart: a drain with a ttl and a reason survives a
// restart with its end unchanged; the history shows what came before; the
// peers are probed again before traffic. A corrupt file never stops peerd.
func TestStateFileAcrossRestart(t *testing.T) {
	a := newFakeParent(t, "a")
	b := newFakeParent(t, "b")
	statePath := filepath.Join(t.TempDir(), "state.json")
	cfg := withProxy(baseConfig, fmt.Sprintf("state_file = %q", statePath)) + peerBlock("", a, b)
	p := startPeerd(t, cfg)
	type adminView struct {
		AdminState  string     `json:"admin_state"`
		AdminReason *string    `json:"admin_reason"`
		AdminUntil  *time.Time `json:"admin_until"`
		State       string     `json:"state"`
	}
	req, _ := http.NewRequest("PUT", "http://"+p.admin+"/peers/a/state", strings.NewReader(`{"admin_state":"drain","reason":"kernel upgrade","ttl":"10m"}`))
	req.Header.Set("Authorization", "Bearer secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("drain: %v %v", resp, err)
	}
	resp.Body.Close()
	var before adminView
	p.adminJSON("GET", "/peers/a", "", &before)
	waitFor(t, "the state file written", 10*time.Second, func() bool {
		b, _ := os.ReadFile(statePath)
		return strings.Contains(string(b), "kernel upgrade")
	})
	p.stop()

	p2 := startPeerd(t, cfg)
	var after adminView
	p2.adminJSON("GET", "/peers/a", "", &after)
	if after.AdminState != "drain" || after.AdminReason == nil || *after.AdminReason != "kernel upgrade" ||
		after.AdminUntil == nil || before.AdminUntil == nil || !after.AdminUntil.Equal(*before.AdminUntil) {
		t.Fatalf("after the restart: %+v; want the drain, its reason and the same admin_until %v", after, before.AdminUntil)
	}
	var h struct {
		Transitions []struct{ Cause, Error string } `json:"transitions"`
	}
	p2.adminJSON("GET", "/peers/a/history", "", &h)
	found := false
	for _, e := range h.Transitions {
		found = found || e.Cause == "admin" && e.Error == "kernel upgrade"
	}
	if !found {
		t.Fatalf("history after the restart %+v; want the drain from before", h.Transitions)
	}
	if st := p2.peer("b"); st.ProbesTotal == 0 {
		t.Fatal("b was not probed after the restart (nothing is assumed alive from the file)")
	}
	p2.stop()

	// A corrupt file is logged and ignored.
	os.WriteFile(statePath, []byte(`{"version": 1, "peers": {"a": {"addr": `), 0o644)
	p3 := startPeerd(t, cfg)
	if !strings.Contains(p3.logs(), "state file ignored") {
		t.Fatal("a corrupt state file was not reported")
	}
	if st := p3.peer("a"); st.AdminState != "enabled" {
		t.Fatalf("a = %+v after a corrupt state file; want a fresh start", st)
	}
}

// TestBinaryUpgradeReadyThenDies: a new binary that says ready and then
// dies is not trusted: the old process keeps its listeners through the
// grace period, sees the new one go, and goes on serving (with the PID
// file naming it again).
func TestBinaryUpgradeReadyThenDies(t *testing.T) {
	origin := slowOrigin(t)
	u := startUpgradable(t, upgradeConfig)
	os.WriteFile(u.bin+".new", []byte("#!/bin/sh\necho ready >&$PEERD_UPGRADE_READY\nsleep 1\nexit 3\n"), 0o755)
	os.Rename(u.bin+".new", u.bin)
	u.cmd.Process.Signal(syscall.SIGUSR2)
	waitFor(t, "the dead new process logged", 40*time.Second, func() bool {
		return strings.Contains(u.logs(), "the new process exited after it said it was ready; this process keeps serving")
	})
	proxyURL, _ := url.Parse("http://" + u.proxy)
	cl := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 5 * time.Second}
	for i := range 5 {
		resp, err := cl.Get(fmt.Sprintf("http://%s/small/after-%d", origin, i))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("after the new process died: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	if pid := u.servingPID(); pid != u.cmd.Process.Pid {
		t.Fatalf("pid file names %d; want the old process %d", pid, u.cmd.Process.Pid)
	}
}

// TestBinaryUpgradeRefusedAsPID1: peerd as PID 1 of its own PID namespace
// (a container's init) refuses SIGUSR2 with a log line and keeps serving.
func TestBinaryUpgradeRefusedAsPID1(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare")
	}
	if out, err := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "true").CombinedOutput(); err != nil {
		t.Skipf("cannot make a PID namespace here: %v %s", err, out)
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "peerd.toml")
	os.WriteFile(cfgPath, []byte(upgradeConfig), 0o644)
	var log syncBuffer
	cmd := exec.Command("unshare", "--pid", "--fork", "--kill-child", "--mount-proc", peerdBin, "-config", cfgPath)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// unshare ignores SIGTERM while its child runs: peerd is stopped by
	// its host pid, then unshare ends with it.
	pid := 0
	t.Cleanup(func() {
		if pid > 0 {
			syscall.Kill(pid, syscall.SIGTERM)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("peerd log:\n%s", log.String())
		}
	})
	waitFor(t, "peerd serving as PID 1", 30*time.Second, func() bool { return servingRe.MatchString(log.String()) })
	m := servingRe.FindStringSubmatch(log.String())
	if m[2] != "1" {
		t.Fatalf("peerd runs as pid %s; want 1", m[2])
	}
	// The signal goes to peerd's host pid (unshare --fork forwards none).
	waitFor(t, "peerd's host pid", 10*time.Second, func() bool {
		out, _ := exec.Command("pgrep", "-f", "-n", "^"+regexp.QuoteMeta(peerdBin+" -config "+cfgPath)+"$").Output()
		pid, _ = strconv.Atoi(strings.TrimSpace(string(out)))
		return pid > 1
	})
	syscall.Kill(pid, syscall.SIGUSR2)
	waitFor(t, "the refusal logged", 20*time.Second, func() bool {
		return strings.Contains(log.String(), "binary upgrade refused: peerd is PID 1")
	})
	resp, err := http.Get("http://" + m[1] + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the refused upgrade: %v %v", resp, err)
	}
	resp.Body.Close()
}

// syncBuffer is a bytes.Buffer a process writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
