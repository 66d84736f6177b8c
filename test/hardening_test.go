package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAdminHardening, through the binary: the Bearer scheme in any case,
// one JSON value per body, a source that keeps guessing the token slowed
// down, and an idle admin connection closed.
func TestAdminHardening(t *testing.T) {
	a := newFakeParent(t, "a")
	p := startPeerd(t, baseConfig+peerBlock("", a))
	put := func(auth, body string) int {
		req, _ := http.NewRequest("PUT", "http://"+p.admin+"/peers/a/state", strings.NewReader(body))
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := put("bearer secret", `{"admin_state":"drain"}`); code != 200 {
		t.Fatalf("lower-case bearer: %d; want 200", code)
	}
	if code := put("Bearer secret", `{"admin_state":"enabled"} junk`); code != 400 {
		t.Fatalf("junk after the JSON: %d; want 400", code)
	}
	if st := p.peer("a"); st.AdminState != "drain" {
		t.Fatalf("a refused body changed the state to %s", st.AdminState)
	}
	codes := ""
	for i := 0; i < 7; i++ {
		codes += fmt.Sprint(put("Bearer guess", `{"admin_state":"enabled"}`), " ")
	}
	if !strings.HasSuffix(codes, "429 429 ") || !strings.HasPrefix(codes, "401 ") {
		t.Fatalf("repeated wrong tokens answered %s; want 401s, then 429", codes)
	}
	// peerd's stderr reaches the test through a pipe: wait for the line.
	waitFor(t, "the failed token attempts logged", 5*time.Second, func() bool { return strings.Contains(p.logs(), "admin write refused") })
	// An admin connection that sends nothing is closed (read/header
	// timeouts), rather than held forever.
	c, err := net.Dial("tcp", p.admin)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n") // never finished
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	start := time.Now()
	io.ReadAll(c)
	if d := time.Since(start); d > 25*time.Second {
		t.Fatalf("a half-sent admin request held its connection %v", d)
	}
}

// TestSizeOverflowRefused: a byte size past int64 is a config error with
// its key and line, not a wrapped number.
func TestSizeOverflowRefused(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "big.toml")
	os.WriteFile(path, []byte("[proxy]\nmax_retry_body = \"99999999999999999KiB\"\n"), 0o644)
	out, err := exec.Command(peerdBin, "-check", "-config", path).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "line 2: proxy.max_retry_body") {
		t.Fatalf("-check: %v\n%s", err, out)
	}
}

// TestJSONLogsStayJSON: with format = "json" every line peerd writes is a
// JSON object, including what its HTTP servers would have printed.
func TestJSONLogsStayJSON(t *testing.T) {
	t.Parallel()
	p := startPeerd(t, strings.Replace(directConfig, "[admin]\n", "[log]\nformat = \"json\"\nlevel = \"debug\"\n[admin]\n", 1))
	// Provoke the admin server's own complaints: garbage and a TLS hello.
	for _, junk := range []string{"\x16\x03\x01\x00\x05hello", "NOT HTTP\r\n\r\n"} {
		c, err := net.Dial("tcp", p.admin)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, junk)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		io.ReadAll(c)
		c.Close()
	}
	rawBody(t, p, "GET http://o.test/ HTTP/1.1\nbroken\n\n")
	p.stop()
	for _, line := range strings.Split(strings.TrimSpace(p.logs()), "\n") {
		var v map[string]any
		if json.Unmarshal([]byte(line), &v) != nil {
			t.Fatalf("a log line that is not JSON: %q", line)
		}
	}
}

// TestAccessLogEscapesURLs: bytes that are not printable ASCII are
// %-escaped in the access log, as Squid writes them.
func TestAccessLogEscapesURLs(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	log := filepath.Join(t.TempDir(), "access.log")
	p := startPeerd(t, directConfig+"[log]\naccess_log = \""+log+"\"\n")
	rawBody(t, p, "GET http://"+origin+"/caf\xc3\xa9\xff HTTP/1.1\r\nHost: x\r\n\r\n")
	p.stop()
	b, _ := os.ReadFile(log)
	if !bytes.Contains(b, []byte("/caf%C3%A9%FF ")) || bytes.ContainsAny(b, "\xc3\xff") {
		t.Fatalf("access log:\n%s", b)
	}
}

// TestAdminHostGuard: through the binary, the admin API answers its own
// address and localhost, and 421 to a name a rebinding page would use,
// for reads and writes alike.
func TestAdminHostGuard(t *testing.T) {
	t.Parallel()
	p := startPeerd(t, directConfig)
	for host, want := range map[string]int{"": 200, "localhost": 200, "rebind.attacker.example": 421} {
		for _, method := range []string{"GET", "POST"} {
			path := "/peers"
			if method == "POST" {
				path = "/reload"
			}
			req, _ := http.NewRequest(method, "http://"+p.admin+path, nil)
			if host != "" {
				req.Host = host
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got := resp.StatusCode
			if method == "POST" && got != 421 {
				got = 200 // a write reached its token check (401/403): answered
			}
			if got != want {
				t.Errorf("%s %s with Host %q: %d; want %d", method, path, host, resp.StatusCode, want)
			}
		}
	}
}

// TestStateFileMustBeRegular: a FIFO (or any non-regular file) at
// state_file is a -check error naming the key, and the start refuses it
// at once instead of hanging on the read.
func TestStateFileMustBeRegular(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "state.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip(err)
	}
	path := filepath.Join(dir, "peerd.toml")
	os.WriteFile(path, []byte(fmt.Sprintf("[proxy]\nlisten = \"127.0.0.1:0\"\nstate_file = %q\n[admin]\nlisten = \"127.0.0.1:0\"\n", fifo)), 0o644)
	for _, args := range [][]string{{"-check", "-config", path}, {"-config", path}} {
		cmd := exec.Command(peerdBin, args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(out.String(), "state_file") || !strings.Contains(out.String(), "FIFO") {
				t.Fatalf("peerd %v with a FIFO state_file: %v\n%s", args, err, out.String())
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("peerd %v hung on a FIFO state_file", args)
		}
	}
}
