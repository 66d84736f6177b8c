package cli

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestStatusTable(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/peers" {
			http.NotFound(w, r)
			return
		}
		dead := time.Now().Add(-90 * time.Second).UTC().Format(time.RFC3339)
		w.Write([]byte(`{"peers": [
			{"name": "p1", "type": "parent", "host": "10.0.0.1", "port": 3128, "state": "alive", "admin_state": "enabled", "connect_time_ms": 1.5, "requests_total": 42},
			{"name": "p2", "type": "parent", "host": "10.0.0.2", "port": 3128, "state": "dead", "admin_state": "drain", "admin_reason": "kernel upgrade",
			 "dead_since": "` + dead + `", "last_error": "connection refused", "flapping": true, "consecutive_failures": 10}]}`))
	}))
	defer srv.Close()
	var out, errOut bytes.Buffer
	if code := Status(context.Background(), []string{"-admin", srv.URL}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "PEER") {
		t.Fatalf("table:\n%s", out.String())
	}
	for _, want := range []string{"p1", "10.0.0.1:3128", "alive", "1.5ms", "42"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("p1's row %q lacks %q", lines[1], want)
		}
	}
	for _, want := range []string{"p2", "dead (flapping)", "drain", "kernel upgrade", "dead for 1m3", "connection refused"} {
		if !strings.Contains(lines[2], want) {
			t.Errorf("p2's row %q lacks %q", lines[2], want)
		}
	}
	if strings.Contains(out.String(), "\x1b[") {
		t.Error("colour written to a non-terminal")
	}
	if idx := strings.Index(lines[0], "STATE"); strings.Index(lines[1], "alive") != idx {
		t.Errorf("columns not aligned:\n%s", out.String())
	}
	if code := Status(context.Background(), []string{"-admin", "127.0.0.1:1"}, &out, &errOut); code != exitRuntime {
		t.Fatalf("unreachable admin: exit %d; want %d", code, exitRuntime)
	}
}

func TestStatusColour(t *testing.T) {
	var b bytes.Buffer
	printStatus(&b, []statusPeer{{Name: "alive", Type: "parent", State: "alive", AdminState: "enabled"}, {Name: "d", Type: "parent", State: "dead", AdminState: "enabled"}}, true, time.Now())
	lines := strings.Split(b.String(), "\n")
	if !strings.Contains(lines[1], green+"alive"+reset) || !strings.HasPrefix(lines[1], "alive ") || !strings.Contains(lines[2], red+"dead"+reset) {
		t.Fatalf("coloured table:\n%q", b.String())
	}
}

// TestPurgeNamesEachMember: the members that acknowledged a purge are
// printed one by one, not run together.
func TestPurgeNamesEachMember(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodDelete || r.URL.Path != "/cache" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(`{"purged": 1, "acknowledged": ["b", "c"]}`))
	}))
	defer srv.Close()
	var out, errOut bytes.Buffer
	if code := Purge(context.Background(), []string{"-admin", srv.URL, "http://o.test/x"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "acknowledged by 2 member(s): b, c\n") {
		t.Fatalf("purge printed:\n%s", out.String())
	}
}
