package e2e

import (
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReloadFailsHalfWay: a reload that cannot finish (the new admin
// address is taken; the new access log cannot be opened) is refused, and
// nothing it opened on the way stays open: the new proxy port refuses
// connections, and the old config keeps serving.
func TestReloadFailsHalfWay(t *testing.T) {
	t.Parallel()
	a := newFakeParent(t, "a")
	cfg := baseConfig + peerBlock("", a)
	p := startPeerd(t, cfg)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for i, change := range []struct{ what, admin, log string }{
		{"admin address in use", taken.Addr().String(), ""},
		{"access log cannot be opened", "127.0.0.1:0", filepath.Join(t.TempDir(), "no", "such", "dir", "access.log")},
	} {
		newPort := freePort(t)
		next := strings.Replace(cfg, "[proxy]\nlisten = \"127.0.0.1:0\"", "[proxy]\nlisten = \"127.0.0.1:"+newPort+"\"", 1)
		next = strings.Replace(next, "[admin]\nlisten = \"127.0.0.1:0\"", "[admin]\nlisten = \""+change.admin+"\"", 1)
		if change.log != "" {
			next = strings.Replace(next, "[log]\n", "[log]\naccess_log = \""+change.log+"\"\n", 1)
		}
		reloadConfig(t, p, next)
		p.signal(syscall.SIGHUP)
		waitFor(t, "refusal", 5*time.Second, func() bool { return countLog(p, "config reload refused") == i+1 })
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+newPort, time.Second); err == nil {
			c.Close()
			t.Fatalf("%s: the refused reload left the new proxy port %s open", change.what, newPort)
		}
		if r := do(p.client(), "GET", "http://o.test/", ""); r.String() != "200 from a" {
			t.Fatalf("%s: after the refused reload: %s", change.what, r)
		}
	}
}

// TestReloadChangesLogin: a changed login applies to the next request on
// a pooled connection as well as to CONNECT.
func TestReloadChangesLogin(t *testing.T) {
	t.Parallel()
	a := newFakeParent(t, "a")
	cfg := baseConfig + peerBlock(`login = "old:one"`, a)
	p := startPeerd(t, cfg)
	c := p.client()
	if r := bodyOf(t, c, "http://o.test/1"); !strings.Contains(r, "auth=Basic b2xkOm9uZQ==") {
		t.Fatalf("before reload the parent saw %q; want old:one", r)
	}
	reloadConfig(t, p, strings.Replace(cfg, "old:one", "new:two", 1))
	p.signal(syscall.SIGHUP)
	waitFor(t, "reload", 5*time.Second, func() bool { return countLog(p, "config reloaded") == 1 })
	for i := 0; i < 3; i++ {
		if r := bodyOf(t, c, "http://o.test/2"); !strings.Contains(r, "auth=Basic bmV3OnR3bw==") {
			t.Fatalf("after reload the parent saw %q; want new:two", r)
		}
	}
	if n := len(a.records()); n > 3 {
		t.Logf("%d connections to the parent (pooled ones reused)", n)
	}
}

// bodyOf GETs u and returns the body.
func bodyOf(t *testing.T, c *http.Client, u string) string {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
