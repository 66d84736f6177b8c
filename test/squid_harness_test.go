package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/peerd/peerd/internal/testbed"
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

// squid is a real Squid (testbed.Squid) tied to a test.
type squid struct {
	*testbed.Squid
	t    testing.TB
	name string
	addr string
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

// startSquid starts Squid with a generated config: memory cache only,
// logs in a temp dir, clients from localhost only. extra is appended to
// squid.conf.
func startSquid(t testing.TB, name, extra string) *squid {
	t.Helper()
	return startSquidWith(t, testbed.SquidOptions{Name: name, Extra: extra})
}

// startSquidWith is startSquid with every option.
func startSquidWith(t testing.TB, o testbed.SquidOptions) *squid {
	t.Helper()
	name := o.Name
	bin := requireSquid(t)
	dir, err := os.MkdirTemp("", "peerd-squid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sq, err := testbed.StartSquid(bin, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sq.Kill)
	return &squid{Squid: sq, t: t, name: name, addr: sq.Addr}
}

func (s *squid) port() string { return s.Port() }

func (s *squid) start() {
	s.t.Helper()
	if err := s.Start(); err != nil {
		s.t.Fatal(err)
	}
}

// kill SIGKILLs squid (no goodbye: a crash, as far as peers can tell).
func (s *squid) kill() { s.Kill() }

// accessLog returns Squid's access.log lines for requests (probes left out).
func (s *squid) accessLog() []string { return s.AccessLog() }

func (s *squid) peerName() string { return s.name }

// flushed waits until everything Squid logged before now is in its
// access log: a marker request sent to it directly (to a closed port, so
// it fails at once) is logged after them; the lines before the marker
// are returned.
func (s *squid) flushed() []string {
	s.t.Helper()
	mark := fmt.Sprintf("http://127.0.0.1:1/peerd-flush-%d", time.Now().UnixNano())
	u, _ := url.Parse("http://" + s.addr)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}, Timeout: 10 * time.Second}
	if resp, err := c.Get(mark); err == nil {
		resp.Body.Close()
	}
	var before []string
	waitFor(s.t, "squid logs the marker", 10*time.Second, func() bool {
		lines := s.accessLog()
		for i, l := range lines {
			if strings.Contains(l, mark) {
				before = lines[:i]
				return true
			}
		}
		return false
	})
	return before
}
