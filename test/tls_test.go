package e2e

// TLS to parents (issue 25), through the binary, against a real Squid
// that listens only on https_port, with a CA and certificates the test
// makes.

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/peerd/peerd/internal/testbed"
)

// testCA makes a CA and a server certificate for names (and 127.0.0.1)
// in dir (testbed.WriteCA); it returns the paths.
func testCA(t *testing.T, dir string, names ...string) (caPath, certPath, keyPath string) {
	t.Helper()
	caPath, certPath, keyPath, err := testbed.WriteCA(dir, names...)
	if err != nil {
		t.Fatal(err)
	}
	return caPath, certPath, keyPath
}

// startTLSSquid starts a Squid that listens only on an https_port.
func startTLSSquid(t *testing.T, name, certPath, keyPath string) *squid {
	t.Helper()
	bin := requireSquid(t)
	dir, err := os.MkdirTemp("", "peerd-squid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// Squid runs as the proxy user: it must read the key.
	os.Chmod(certPath, 0o644)
	os.Chmod(keyPath, 0o644)
	os.Chmod(filepath.Dir(certPath), 0o755)
	sq, err := testbed.StartSquid(bin, dir, testbed.SquidOptions{Name: name, TLSCert: certPath, TLSKey: keyPath})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sq.Kill)
	return &squid{Squid: sq, t: t, name: name, addr: sq.Addr}
}

func TestTLSParentSquid(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, originHandler)
	echo := echoServer(t)
	pki, err := os.MkdirTemp("", "peerd-pki-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(pki) })
	caPath, certPath, keyPath := testCA(t, pki, "squid.test")
	sq := startTLSSquid(t, "tlssquid", certPath, keyPath)
	peer := func(name string) string {
		return fmt.Sprintf("[[peer]]\nname = %q\nhost = \"127.0.0.1\"\nport = %s\ntls = true\ntls_ca = %q\ntls_name = %q\n", "s", sq.port(), caPath, name)
	}
	cfg := strings.Replace(baseConfig, `connect_timeout = "2s"`, `connect_timeout = "2s"`, 1) + `
[health]
connect_fail_limit = 2
probe_interval = "500ms"
probe_max_interval = "1s"
`
	p := startPeerd(t, cfg+peer("squid.test"))
	cl := p.client()
	for i := 0; i < 5; i++ {
		resp, b := get(t, cl, fmt.Sprintf("http://%s/tls/%d", origin, i))
		if resp.StatusCode != 200 || !strings.Contains(b, "origin /tls/") {
			t.Fatalf("GET through the TLS parent: %d %q", resp.StatusCode, b)
		}
	}
	// CONNECT through the TLS parent to a line echo.
	c, br := dialProxy(t, p)
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", echo, echo)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT through the TLS parent: %v %v", resp, err)
	}
	fmt.Fprintf(c, "hello through tls\n")
	if l, err := bufio.NewReader(br).ReadString('\n'); err != nil || l != "hello through tls\n" {
		t.Fatalf("tunnel: %q %v", l, err)
	}
	var st struct {
		TLS   bool   `json:"tls"`
		State string `json:"state"`
	}
	p.adminJSON("GET", "/peers/s", "", &st)
	if !st.TLS || st.State != "alive" {
		t.Fatalf("PEER %+v; want tls and alive", st)
	}
	if n := len(sq.accessLog()); n < 5 {
		t.Fatalf("squid logged %d requests; want the GETs over TLS", n)
	}

	// A wrong tls_name: connect failures of class tls; no request is
	// ever served through it.
	p2 := startPeerd(t, cfg+peer("wrong.test"))
	waitFor(t, "the mis-named TLS parent dead", 10*time.Second, func() bool { return p2.peer("s").State == "dead" })
	var fc struct {
		FailuresByClass map[string]int `json:"failures_by_class"`
	}
	p2.adminJSON("GET", "/peers/s", "", &fc)
	if fc.FailuresByClass["tls"] == 0 {
		t.Fatalf("failures_by_class %v; want tls", fc.FailuresByClass)
	}
	if r := do(p2.client(), "GET", "http://"+origin+"/never", ""); r.status != 503 {
		t.Fatalf("through a parent whose certificate does not verify: %s; want 503", r)
	}
}

var tlsAddrRe = regexp.MustCompile(`tls="?([0-9.:]+)"?`)

// TestTLSListenerWithCurl: curl uses peerd as a secure web proxy
// (--proxy https://) with the test's CA; a reload puts a new
// certificate in force for new connections.
func TestTLSListenerWithCurl(t *testing.T) {
	t.Parallel()
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl is not installed")
	}
	origin := newOrigin(t, originHandler)
	pki := t.TempDir()
	caPath, certPath, keyPath := testCA(t, pki, "proxy.test")
	// DIRECT to the loopback origin ([access] is baseConfig's last table).
	cfg := withProxy(baseConfig, `tls_listen = "127.0.0.1:0"`, fmt.Sprintf("tls_cert = %q", certPath), fmt.Sprintf("tls_key = %q", keyPath)) +
		"deny_to_local = false\n"
	cfg = strings.Replace(cfg, `direct = "never"`, `direct = "allow"`, 1)
	p := startPeerd(t, cfg)
	m := tlsAddrRe.FindStringSubmatch(p.logs())
	if m == nil {
		t.Fatalf("no TLS listener in the serving line:\n%s", p.logs())
	}
	tlsAddr := m[1]
	_, port, _ := net.SplitHostPort(tlsAddr)
	run := func() (string, error) {
		out, err := exec.Command(curl, "-sS", "--max-time", "10", "--proxy", "https://proxy.test:"+port,
			"--resolve", "proxy.test:"+port+":127.0.0.1", "--proxy-cacert", caPath, "http://"+origin+"/over-tls").CombinedOutput()
		return string(out), err
	}
	if out, err := run(); err != nil || !strings.Contains(out, "origin /over-tls") {
		t.Fatalf("curl through the TLS listener: %v\n%s", err, out)
	}
	// Without the CA, curl refuses the proxy's certificate: it is TLS.
	out, err := exec.Command(curl, "-sS", "--max-time", "10", "--proxy", "https://proxy.test:"+port,
		"--resolve", "proxy.test:"+port+":127.0.0.1", "http://"+origin+"/x").CombinedOutput()
	if err == nil {
		t.Fatalf("curl accepted an unknown CA: %s", out)
	}
	// A new certificate (another CA) on reload: new connections get it.
	ca2, cert2, key2 := testCA(t, t.TempDir(), "proxy.test")
	os.WriteFile(certPath, mustRead2(t, cert2), 0o644)
	os.WriteFile(keyPath, mustRead2(t, key2), 0o644)
	p.signal(syscall.SIGHUP)
	waitFor(t, "the new certificate in force", 10*time.Second, func() bool {
		out, err := exec.Command(curl, "-sS", "--max-time", "5", "--proxy", "https://proxy.test:"+port,
			"--resolve", "proxy.test:"+port+":127.0.0.1", "--proxy-cacert", ca2, "http://"+origin+"/after-reload").CombinedOutput()
		return err == nil && strings.Contains(string(out), "origin /after-reload")
	})
}

func mustRead2(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
