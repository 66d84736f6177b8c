package e2e

// The command line against a live peerd (issue 41): help and -h exit 0,
// the admin commands find the API and its token in the config (or -admin
// and PEERD_ADMIN_TOKEN), and exit 0 when done, 1 when refused and 2 when
// peerd cannot be reached.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cli runs peerd with args and env added; its exit code and output.
func cli(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := osexec.Command(peerdBin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, _ := cmd.CombinedOutput()
	return cmd.ProcessState.ExitCode(), string(out)
}

func TestCLIHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		code, out := cli(t, nil, args...)
		if code != 0 {
			t.Fatalf("peerd %v: exit %d", args, code)
		}
		if n := strings.Count(out, "Usage:"); n != 1 {
			t.Fatalf("peerd %v prints its usage %d times:\n%s", args, n, out)
		}
		for _, sub := range []string{"status", "peers", "peer", "drain", "maintenance", "enable", "probe", "reload", "purge", "plan", "import-squid"} {
			if !strings.Contains(out, "\n  "+sub+" ") {
				t.Fatalf("peerd %v does not list %s:\n%s", args, sub, out)
			}
		}
	}
	for _, sub := range []string{"status", "peers", "peer", "drain", "maintenance", "enable", "probe", "reload", "purge", "plan", "import-squid"} {
		if code, out := cli(t, nil, sub, "-h"); code != 0 || !strings.Contains(out, "Usage: peerd "+sub) {
			t.Fatalf("peerd %s -h: exit %d\n%s", sub, code, out)
		}
	}
	if code, _ := cli(t, nil, "no-such-command"); code != 1 {
		t.Fatalf("an unknown command: exit %d; want 1", code)
	}
}

func TestCLIAgainstALivePeerd(t *testing.T) {
	t.Parallel()
	a, b := newFakeParent(t, "a"), newFakeParent(t, "b")
	a.SetHeader("Cache-Control", "max-age=600")
	p := startPeerd(t, baseConfig+peerBlock("", a, b))
	api := []string{"-admin", "http://" + p.admin}
	withToken := []string{"PEERD_ADMIN_TOKEN=secret"}

	code, out := cli(t, nil, append([]string{"peers"}, api...)...)
	if code != 0 || !strings.Contains(out, "PEER") || !strings.Contains(out, "\na ") || !strings.Contains(out, "\nb ") {
		t.Fatalf("peers: exit %d\n%s", code, out)
	}
	if code, out := cli(t, nil, append([]string{"peers", "-json"}, api...)...); code != 0 || !strings.Contains(out, `"connect_fail_limit"`) {
		t.Fatalf("peers -json: exit %d\n%s", code, out)
	}
	// A write without the token is refused (1), with the API's error.
	if code, out := cli(t, nil, append([]string{"drain", "a"}, api...)...); code != 1 || !strings.Contains(out, "401") {
		t.Fatalf("drain without a token: exit %d\n%s", code, out)
	}
	// Flags after the name, as an operator types them.
	code, out = cli(t, withToken, append([]string{"drain", "a", "-reason", "kernel upgrade", "-ttl", "30m"}, api...)...)
	if code != 0 || !strings.Contains(out, "peer a: drain (reason: kernel upgrade, for 30m") {
		t.Fatalf("drain: exit %d\n%s", code, out)
	}
	if st := p.peer("a"); st.AdminState != "drain" {
		t.Fatalf("a is %s after peerd drain", st.AdminState)
	}
	if code, out := cli(t, nil, append([]string{"peer", "a"}, api...)...); code != 0 || !strings.Contains(out, "admin state") || !strings.Contains(out, "history") {
		t.Fatalf("peer a: exit %d\n%s", code, out)
	}
	if code, out := cli(t, withToken, append([]string{"maintenance", "b"}, api...)...); code != 0 || !strings.Contains(out, "peer b: maintenance") {
		t.Fatalf("maintenance: exit %d\n%s", code, out)
	}
	for _, n := range []string{"a", "b"} {
		if code, out := cli(t, withToken, append([]string{"enable", n}, api...)...); code != 0 || !strings.Contains(out, "peer "+n+": enabled") {
			t.Fatalf("enable %s: exit %d\n%s", n, code, out)
		}
	}
	if code, out := cli(t, withToken, append([]string{"probe", "a"}, api...)...); code != 0 || !strings.Contains(out, "peer a: alive") {
		t.Fatalf("probe: exit %d\n%s", code, out)
	}
	if code, out := cli(t, withToken, append([]string{"probe", "nope"}, api...)...); code != 1 || !strings.Contains(out, "404") {
		t.Fatalf("probe of an unknown peer: exit %d\n%s", code, out)
	}
	if code, out := cli(t, nil, append([]string{"plan", "http://origin.test/x"}, api...)...); code != 0 || !strings.Contains(out, "1. a (parent") {
		t.Fatalf("plan: exit %d\n%s", code, out)
	}
	if r := do(p.client(), "GET", "http://origin.test/cached", ""); r.status != 200 {
		t.Fatalf("GET: %s", r)
	}
	if code, out := cli(t, withToken, append([]string{"purge", "http://origin.test/cached"}, api...)...); code != 0 || !strings.Contains(out, "purged 1") {
		t.Fatalf("purge: exit %d\n%s", code, out)
	}
	if code, out := cli(t, withToken, append([]string{"reload"}, api...)...); code != 0 || !strings.Contains(out, "reloaded") {
		t.Fatalf("reload: exit %d\n%s", code, out)
	}
	if code, out := cli(t, nil, "status", "-admin", "http://127.0.0.1:1"); code != 2 {
		t.Fatalf("status of a peerd that is not there: exit %d; want 2\n%s", code, out)
	}
}

// TestCLIReadsTheConfig: with -config, the commands dial the config's
// admin address with its token.
func TestCLIReadsTheConfig(t *testing.T) {
	t.Parallel()
	a := newFakeParent(t, "a")
	port := freePort(t)
	cfg := strings.Replace(baseConfig, "[admin]\nlisten = \"127.0.0.1:0\"", fmt.Sprintf("[admin]\nlisten = \"0.0.0.0:%s\"", port), 1) + peerBlock("", a)
	p := startPeerd(t, cfg)
	path := filepath.Join(t.TempDir(), "peerd.toml")
	os.WriteFile(path, []byte(cfg), 0o600)
	if code, out := cli(t, nil, "drain", "a", "-config", path); code != 0 || !strings.Contains(out, "peer a: drain") {
		t.Fatalf("drain -config: exit %d\n%s", code, out)
	}
	if st := p.peer("a"); st.AdminState != "drain" {
		t.Fatalf("a is %s", st.AdminState)
	}
	if code, out := cli(t, nil, "status", "-config", path); code != 0 || !strings.Contains(out, "drain") {
		t.Fatalf("status -config: exit %d\n%s", code, out)
	}
	// Global flags go before the command as well as after it.
	if code, out := cli(t, nil, "-config", path, "enable", "a"); code != 0 || !strings.Contains(out, "peer a: enabled") {
		t.Fatalf("-config FILE enable: exit %d\n%s", code, out)
	}
	if code, out := cli(t, nil, "-config="+path, "drain", "a", "-reason", "mid-incident"); code != 0 || !strings.Contains(out, "peer a: drain") {
		t.Fatalf("-config=FILE drain: exit %d\n%s", code, out)
	}
	// Mid-incident, with the file half edited: a syntax error or a wrong
	// type outside [admin] does not stop the admin commands.
	for name, broken := range map[string]string{
		"a half-written peer": cfg + "\n[[peer]]\nname = \"c\nhost =\n",
		"a wrong type":        cfg + "\n[health]\nconnect_fail_limit = \"many\"\n",
	} {
		os.WriteFile(path, []byte(broken), 0o600)
		if code, out := cli(t, nil, "-config", path, "status"); code != 0 || !strings.Contains(out, "drain") {
			t.Fatalf("status with %s elsewhere in the file: exit %d\n%s", name, code, out)
		}
	}
	// A missing or unreadable file is 1; an admin API that does not
	// answer is 2.
	if code, out := cli(t, nil, "status", "-config", filepath.Join(t.TempDir(), "nope.toml")); code != 1 {
		t.Fatalf("status with a missing file: exit %d; want 1\n%s", code, out)
	}
	p.stop()
	os.WriteFile(path, []byte(cfg), 0o600)
	if code, out := cli(t, nil, "-config", path, "status"); code != 2 {
		t.Fatalf("status with peerd stopped: exit %d; want 2\n%s", code, out)
	}
}

// readiness is GET /readyz's body.
type readiness struct {
	Ready    bool     `json:"ready"`
	NextHops []string `json:"next_hops"`
	Reason   string   `json:"reason"`
	Skipped  []struct {
		Peer, Why string
	} `json:"skipped"`
}

// readyz is GET /readyz's status and body.
func readyz(t *testing.T, p *peerd) (int, readiness) {
	t.Helper()
	resp, err := http.Get("http://" + p.admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r readiness
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("GET /readyz: %v\n%s", err, b)
	}
	return resp.StatusCode, r
}

// TestReadyz: ready while a parent is usable; 503 naming why once every
// parent is dead and direct is never, while /healthz stays 200; ready
// again when one comes back; and with direct allowed, ready whatever the
// parents.
func TestReadyz(t *testing.T) {
	t.Parallel()
	a, b := newFakeParent(t, "a"), newFakeParent(t, "b")
	p := startPeerd(t, baseConfig+health(1, "100ms", "200ms")+peerBlock("", a, b))
	if code, r := readyz(t, p); code != 200 || !r.Ready || fmt.Sprint(r.NextHops) != "[a b]" {
		t.Fatalf("with two live parents: %d %+v", code, r)
	}
	a.stop()
	b.stop()
	for _, n := range []string{"a", "b"} {
		cli(t, []string{"PEERD_ADMIN_TOKEN=secret"}, "probe", n, "-admin", "http://"+p.admin)
	}
	waitFor(t, "both parents dead", 10*time.Second, func() bool { return p.peer("a").State == "dead" && p.peer("b").State == "dead" })
	code, r := readyz(t, p)
	if code != 503 || r.Ready || !strings.Contains(r.Reason, "no usable next hop") || !strings.Contains(r.Reason, "direct is never") ||
		len(r.Skipped) != 2 || r.Skipped[0].Why != "dead" {
		t.Fatalf("with every parent dead: %d %+v", code, r)
	}
	if resp, err := http.Get("http://" + p.admin + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz with every parent dead: %v %v", resp, err)
	}
	a.restart()
	waitFor(t, "ready once a is back", 15*time.Second, func() bool { code, _ := readyz(t, p); return code == 200 })
	// Losing the last next hop was one warning; its return one info line.
	waitFor(t, "the return logged", 5*time.Second, func() bool { return strings.Contains(p.logs(), "a next hop is usable again") })
	lost := 0
	for _, l := range strings.Split(p.logs(), "\n") {
		if strings.Contains(l, "no usable next hop: clients get 503") {
			lost++
			if !strings.Contains(l, "level=warning") {
				t.Errorf("not a warning: %s", l)
			}
		}
	}
	if lost != 1 {
		t.Errorf("%d lines about losing the last next hop; want one", lost)
	}

	d := startPeerd(t, directConfig)
	if code, r := readyz(t, d); code != 200 || fmt.Sprint(r.NextHops) != "[DIRECT]" {
		t.Fatalf("a direct proxy: %d %+v", code, r)
	}
}

// TestMakeInstall: make install DESTDIR=... PREFIX=/usr puts the binary,
// both manual pages, the example config and the unit under the root.
func TestMakeInstall(t *testing.T) {
	if _, err := osexec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	root := t.TempDir()
	cmd := osexec.Command("make", "-C", "..", "install", "DESTDIR="+root, "PREFIX=/usr")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	for _, f := range []string{"usr/bin/peerd", "usr/share/man/man8/peerd.8", "usr/share/man/man5/peerd.toml.5", "etc/peerd/peerd.toml", "lib/systemd/system/peerd.service"} {
		st, err := os.Stat(filepath.Join(root, f))
		if err != nil || st.Size() == 0 {
			t.Fatalf("%s not installed: %v", f, err)
		}
	}
	if code, out := cli(t, nil, "-check", "-config", filepath.Join(root, "etc/peerd/peerd.toml")); code != 0 {
		t.Fatalf("the installed example config: exit %d\n%s", code, out)
	}
	if st, _ := os.Stat(filepath.Join(root, "etc/peerd/peerd.toml")); st.Mode().Perm() != 0o640 {
		t.Fatalf("the config is installed %04o; want 0640 (it may hold secrets)", st.Mode().Perm())
	}
	unit, _ := os.ReadFile(filepath.Join(root, "lib/systemd/system/peerd.service"))
	if !strings.Contains(string(unit), "ExecStart=/usr/bin/peerd -config") || strings.Contains(string(unit), "/usr/local/") {
		t.Fatalf("the unit installed under PREFIX=/usr does not run /usr/bin/peerd:\n%s", unit)
	}
	// A second install (an upgrade) keeps the operator's config, token
	// and logins included, and puts the new example beside it.
	conf := filepath.Join(root, "etc/peerd/peerd.toml")
	mine := "# the operator's own\n[admin]\ntoken = \"kept-across-installs-0123456789abcdef\"\n"
	if err := os.WriteFile(conf, []byte(mine), 0o640); err != nil {
		t.Fatal(err)
	}
	out, err := osexec.Command("make", "-C", "..", "install", "DESTDIR="+root, "PREFIX=/usr").CombinedOutput()
	if err != nil {
		t.Fatalf("second make install: %v\n%s", err, out)
	}
	if got, _ := os.ReadFile(conf); string(got) != mine {
		t.Fatalf("a second make install replaced the operator's config:\n%s", got)
	}
	if !strings.Contains(string(out), "peerd.toml exists and is kept") {
		t.Fatalf("make install did not say it kept the config:\n%s", out)
	}
	if ex, err := os.ReadFile(conf + ".example"); err != nil || !strings.Contains(string(ex), "[proxy]") {
		t.Fatalf("no example beside the kept config: %v", err)
	}
}
