package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Issue 15's flap damping, slow start, import-squid and `peerd status`,
// through the binary.

type peerOps struct {
	State    string `json:"state"`
	Flapping bool   `json:"flapping"`
}

// TestFlapDamping: a parent that died flap_limit times within
// flap_window is revived only after flap_limit good probes in a row,
// probe_interval apart, and shows flapping meanwhile.
func TestFlapDamping(t *testing.T) {
	t.Parallel()
	p1, p2 := newFakeParent(t, "p1"), newFakeParent(t, "p2")
	p := startPeerd(t, baseConfig+`
[health]
connect_fail_limit = 1
probe_interval = "300ms"
probe_max_interval = "300ms"
flap_window = "1m"
flap_limit = 2
`+peerBlock("", p1, p2))
	cl := p.client()
	state := func() peerOps {
		var st peerOps
		p.adminJSON("GET", "/peers/p1", "", &st)
		return st
	}
	waitFor(t, "p1 alive", 5*time.Second, func() bool { return state().State == "alive" })
	kill := func(i int) {
		p1.stop()
		cl.CloseIdleConnections()
		if r := do(cl, "GET", fmt.Sprintf("http://origin.test/f%d", i), ""); r.status != 200 || r.from != "p2" {
			t.Fatalf("GET with p1 down: %s", r)
		}
		waitFor(t, "p1 dead", 5*time.Second, func() bool { return state().State == "dead" })
	}
	kill(1)
	p1.restart()
	waitFor(t, "p1 revived after one death (not flapping)", 5*time.Second, func() bool { return state().State == "alive" })
	kill(2)
	if st := state(); !st.Flapping {
		t.Fatalf("p1 after its second death in the window: %+v; want flapping", st)
	}
	p1.restart()
	sawHeld := false
	waitFor(t, "p1 revived after held probes", 10*time.Second, func() bool {
		st := state()
		if st.State == "dead" && st.Flapping {
			for _, tr := range p.history("p1") {
				if tr.Cause == "flap_hold" {
					sawHeld = true
				}
			}
		}
		return st.State == "alive"
	})
	if !sawHeld {
		t.Errorf("no flap_hold in p1's history while it was held: %+v", p.history("p1"))
	}
	if st := state(); st.Flapping {
		t.Errorf("p1 revived but still flapping: %+v", st)
	}
}

// TestSlowStart: a revived parent's share under weighted round-robin
// starts small and grows to its full weight over slow_start.
func TestSlowStart(t *testing.T) {
	p1, p2 := newFakeParent(t, "p1"), newFakeParent(t, "p2")
	p := startPeerd(t, baseConfig+policy("weighted-round-robin")+`
[health]
connect_fail_limit = 1
probe_interval = "100ms"
probe_max_interval = "100ms"
flap_limit = 0
slow_start = "4s"
`+peerBlock("", p1, p2))
	waitFor(t, "p1 alive", 5*time.Second, func() bool { return p.peer("p1").State == "alive" })
	cl := p.client()
	p1.stop()
	cl.CloseIdleConnections()
	do(cl, "GET", "http://origin.test/kill", "")
	waitFor(t, "p1 dead", 5*time.Second, func() bool { return p.peer("p1").State == "dead" })
	p1.restart()
	waitFor(t, "p1 revived", 5*time.Second, func() bool { return p.peer("p1").State == "alive" })
	share := func(n int) float64 {
		by := 0
		for i := 0; i < n; i++ {
			if r := do(cl, "GET", fmt.Sprintf("http://origin.test/s%d", i), ""); r.from == "p1" {
				by++
			}
		}
		return float64(by) / float64(n)
	}
	early := share(40)
	if early > 0.3 {
		t.Errorf("p1's share just after revival: %.0f%%; slow start begins at 10%%", early*100)
	}
	// The ramp ends: p1 gets its full half again (polled, within 10 s).
	var late float64
	waitFor(t, "p1 back to its full share", 10*time.Second, func() bool { late = share(40); return late >= 0.4 })
	t.Logf("p1 share: %.0f%% just after revival, %.0f%% after slow_start", early*100, late*100)
}

// TestImportSquidThroughBinary: `peerd import-squid FILE` prints a config
// that `peerd -check` accepts, with what it cannot carry on stderr.
func TestImportSquidThroughBinary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	conf := filepath.Join(dir, "squid.conf")
	os.WriteFile(conf, []byte(`http_port 127.0.0.1:3129
visible_hostname edge1
icp_port 3130
cache_peer 10.0.0.1 parent 3128 0 no-query round-robin name=p1 connect-fail-limit=4
cache_peer 10.0.0.2 parent 3128 0 no-query round-robin name=p2 weight=2
cache_peer 10.0.0.9 sibling 3128 3130 proxy-only name=s1
cache_peer_access p1 allow all
never_direct allow all
coredump_dir /var/spool/squid
`), 0o644)
	cmd := exec.Command(peerdBin, "import-squid", conf)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("import-squid: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{`policy = "weighted-round-robin"`, `direct = "never"`, `name = "p1"`, "connect_fail_limit = 4", `type = "sibling"`, "icp_port = 3130", "proxy_only = true"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(stderr.String(), "coredump_dir") {
		t.Errorf("stderr does not list what was not carried over: %q", stderr.String())
	}
	// cache_peer_access p1 allow all restricts nobody: every peer stays
	// eligible for every request, which needs no [[route]] at all.
	if strings.Contains(string(out), "[[route]]") {
		t.Errorf("cache_peer_access p1 allow all became a route; every peer should stay eligible:\n%s", out)
	}
	toml := filepath.Join(dir, "peerd.toml")
	os.WriteFile(toml, out, 0o644)
	if out, err := exec.Command(peerdBin, "-check", "-config", toml).CombinedOutput(); err != nil {
		t.Fatalf("peerd -check on the imported config: %v\n%s", err, out)
	}
	if out, err := exec.Command(peerdBin, "import-squid", filepath.Join(dir, "missing.conf")).CombinedOutput(); err == nil || !strings.Contains(string(out), "missing.conf") {
		t.Errorf("import-squid of a missing file: %v %q; want an error naming it", err, out)
	}
}

// TestStatusCommand: `peerd status -admin URL` prints the peers.
func TestStatusCommand(t *testing.T) {
	t.Parallel()
	p1 := newFakeParent(t, "p1")
	p := startPeerd(t, baseConfig+peerBlock("", p1))
	waitFor(t, "p1 alive", 5*time.Second, func() bool { return p.peer("p1").State == "alive" })
	out, err := exec.Command(peerdBin, "status", "-admin", "http://"+p.admin).CombinedOutput()
	if err != nil {
		t.Fatalf("peerd status: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "p1") || !strings.Contains(string(out), "alive") {
		t.Fatalf("peerd status printed:\n%s", out)
	}
	if strings.Contains(string(out), "\x1b[") {
		t.Errorf("colour codes on a pipe:\n%q", out)
	}
}
