package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// requireSquid skips a test when squid is not installed, unless
// PEERD_REQUIRE_SQUID is set (CI sets it, so these tests never silently
// skip there).
func requireSquid(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("squid")
	if err != nil {
		if os.Getenv("PEERD_REQUIRE_SQUID") != "" {
			t.Fatal("squid is required (PEERD_REQUIRE_SQUID is set) but not installed")
		}
		t.Skip("squid not installed (apt-get install -y squid); skipping real-Squid test")
	}
	return path
}

// squid is a real Squid running in the foreground on a loopback port.
type squid struct {
	t    testing.TB
	bin  string
	name string
	dir  string
	conf string
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, p, _ := net.SplitHostPort(ln.Addr().String())
	return p
}

// startSquid starts Squid with a generated config: no disk cache, logs in a
// temp dir, clients from localhost only. extra is appended to squid.conf.
func startSquid(t testing.TB, name, extra string) *squid {
	t.Helper()
	bin := requireSquid(t)
	dir, err := os.MkdirTemp("", "peerd-squid-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o777) // squid drops to the proxy user
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &squid{t: t, bin: bin, name: name, dir: dir, conf: filepath.Join(dir, "squid.conf")}
	s.addr = "127.0.0.1:" + freePort(t)
	user := ""
	if os.Geteuid() == 0 {
		user = "cache_effective_user proxy\n"
	}
	conf := fmt.Sprintf(`http_port %s
pid_filename %s/squid.pid
cache_log %s/cache.log
access_log stdio:%s/access.log
cache_store_log none
coredump_dir %s
cache_mem 16 MB
shutdown_lifetime 0 seconds
visible_hostname %s
dns_nameservers 127.0.0.1
%s%s
http_access allow localhost
http_access deny all
`, s.addr, dir, dir, dir, dir, name, user, extra)
	if err := os.WriteFile(s.conf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	s.start()
	t.Cleanup(s.kill)
	return s
}

func (s *squid) port() string { _, p, _ := net.SplitHostPort(s.addr); return p }

func (s *squid) start() {
	s.t.Helper()
	s.cmd = exec.Command(s.bin, "-N", "-n", "peerdtest"+strings.ReplaceAll(s.port(), ":", ""), "-f", s.conf)
	out, _ := os.Create(filepath.Join(s.dir, "stderr.log"))
	s.cmd.Stdout, s.cmd.Stderr = out, out
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.done = make(chan struct{})
	go func() { s.cmd.Wait(); out.Close(); close(s.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-s.done:
			s.t.Fatalf("squid %s exited at start:\n%s", s.name, s.logs())
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("squid %s not listening after 30s:\n%s", s.name, s.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill SIGKILLs squid (no goodbye: a crash, as far as peers can tell).
func (s *squid) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	s.cmd.Process.Kill()
	<-s.done
	os.Remove(filepath.Join(s.dir, "squid.pid"))
}

func (s *squid) logs() string {
	a, _ := os.ReadFile(filepath.Join(s.dir, "stderr.log"))
	b, _ := os.ReadFile(filepath.Join(s.dir, "cache.log"))
	return string(a) + string(b)
}

// accessLog returns Squid's access.log lines for requests. Connections
// that ended before any header (peerd's TCP probes, our readiness checks)
// are left out.
func (s *squid) accessLog() []string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "access.log"))
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) != "" && !strings.Contains(l, "error:transaction-end-before-headers") {
			out = append(out, l)
		}
	}
	return out
}

func (s *squid) peerName() string { return s.name }
