package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	osexec "os/exec"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func reloadConfig(t *testing.T, p *peerd, cfg string) {
	t.Helper()
	switch {
	case p.accessLog != "" && !accessLogKey.MatchString(cfg):
		cfg = addAccessLog(cfg, p.accessLog) // the suite's log goes on
	case p.accessLog != "":
		p.accessLog = "" // the test takes its log over: no agreement check
	}
	if err := os.WriteFile(p.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

func countLog(p *peerd, s string) int { return strings.Count(p.logs(), s) }

// TestReload: SIGHUP keeps the state of peers that keep their name, drops
// removed ones (no more probes reach them), starts new ones unknown, and
// refuses a bad file while the old config stays in force.
func TestReload(t *testing.T) {
	t.Parallel()
	a := newFakeParent(t, "a")
	b := newFakeParent(t, "b")
	c := newFakeParent(t, "c")
	health := `
[health]
connect_fail_limit = 1
probe_interval = "100ms"
probe_max_interval = "100ms"
`
	p := startPeerd(t, baseConfig+health+"[selection]\npolicy = \"round-robin\"\n"+peerBlock("", a, b))
	// Kill and revive a: deaths_total = 1.
	a.stop()
	do(p.client(), "GET", "http://o.test/", "")
	do(p.client(), "GET", "http://o.test/", "")
	waitFor(t, "a dead", 5*time.Second, func() bool { return p.peer("a").State == "dead" })
	a.restart()
	waitFor(t, "a alive", 5*time.Second, func() bool { return p.peer("a").State == "alive" })
	b.stop() // b dies at its next request, then is probed every 100ms
	do(p.client(), "GET", "http://o.test/", "")
	do(p.client(), "GET", "http://o.test/", "")
	waitFor(t, "b dead", 5*time.Second, func() bool { return p.peer("b").State == "dead" })
	// New config: a's weight changes, b is removed, c is new.
	// d listens nowhere: it is dead and probed every 100ms, which shows
	// probe rounds going by while b gets nothing.
	dead := fmt.Sprintf("[[peer]]\nname = \"d\"\nhost = \"127.0.0.1\"\nport = %s\n", freePort(t))
	reloadConfig(t, p, baseConfig+health+"[selection]\npolicy = \"round-robin\"\n"+peerBlock("weight = 5", a)+peerBlock("", c)+dead)
	p.signal(syscall.SIGHUP)
	waitFor(t, "reload", 5*time.Second, func() bool { return countLog(p, "config reloaded") == 1 })
	st := p.peer("a")
	if st.DeathsTotal != 1 || st.RevivalsTotal != 1 || st.Weight != 5 {
		t.Fatalf("a after reload = %+v; want counters kept and weight 5", st)
	}
	var gone map[string]string
	if code := p.adminJSON("GET", "/peers/b", "", &gone); code != 404 {
		t.Fatalf("GET /peers/b = %d after removal; want 404", code)
	}
	waitFor(t, "c probed alive", 5*time.Second, func() bool { return p.peer("c").State == "alive" })
	// b's port: nothing may connect to it any more.
	b.restart()
	n := len(b.records())
	probes := p.peer("d").ProbesTotal
	waitFor(t, "five probe rounds of d", 10*time.Second, func() bool { return p.peer("d").ProbesTotal >= probes+5 })
	if got := len(b.records()); got != n {
		t.Fatalf("removed peer b still probed (%d connections)", got-n)
	}

	// A bad file is refused; the running config stays.
	reloadConfig(t, p, baseConfig+"[health]\nconnect_fail_limit = 0\n")
	p.signal(syscall.SIGHUP)
	waitFor(t, "refusal", 5*time.Second, func() bool { return countLog(p, "config reload refused") == 1 })
	if st := p.peer("a"); st.State != "alive" || st.Weight != 5 {
		t.Fatalf("a after refused reload = %+v", st)
	}
	if r := do(p.client(), "GET", "http://o.test/", ""); r.status != 200 {
		t.Fatalf("proxying after a refused reload: %s", r)
	}

	// POST /reload needs the token.
	reloadConfig(t, p, baseConfig+health+peerBlock("", a))
	if code := p.adminJSON("POST", "/reload", "", nil); code != 401 {
		t.Fatalf("POST /reload without token = %d; want 401", code)
	}
	if code := p.adminJSON("POST", "/reload", "secret", nil); code != 200 {
		t.Fatalf("POST /reload = %d; want 200", code)
	}
	if code := p.adminJSON("GET", "/peers/c", "", nil); code != 404 {
		t.Fatalf("c still present after POST /reload: %d", code)
	}
}

// TestReloadMovesListener: a changed listen address is rebound without
// dropping a request in flight on the old one, and answers name the new
// port.
func TestReloadMovesListener(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 4)
	slow := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		time.Sleep(700 * time.Millisecond)
		io.WriteString(w, "slow done")
	})
	cfg := directConfig
	p := startPeerd(t, cfg)
	oldProxy := p.proxy
	done := make(chan result, 1)
	go func() { done <- do(p.client(), "GET", "http://"+slow+"/", "") }()
	<-arrived // the request is in flight at the origin
	port := freePort(t)
	reloadConfig(t, p, strings.Replace(cfg, "127.0.0.1:0", "127.0.0.1:"+port, 1))
	p.signal(syscall.SIGHUP)
	waitFor(t, "listener moved", 5*time.Second, func() bool { return countLog(p, "proxy listener moved") == 1 })
	if r := <-done; r.status != 200 {
		t.Fatalf("in-flight request on the old listener: %s", r)
	}
	p.proxy = "127.0.0.1:" + port
	resp, err := proxyClientFor(t, p.proxy).Get("http://" + slow + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("new listener: %v %v", resp, err)
	}
	resp.Body.Close()
	// X-Cache-Lookup names the port clients now use, as Squid names its
	// http_port.
	if got := resp.Header.Get("X-Cache-Lookup"); !strings.HasSuffix(got, ":"+port) {
		t.Errorf("X-Cache-Lookup after the move = %q; want it to end in :%s", got, port)
	}
	p.proxy = oldProxy
	if r := do(p.client(), "GET", "http://"+slow+"/", ""); r.err == nil {
		t.Fatal("old listener still serving")
	}
}

// TestGracefulShutdown: SIGTERM lets a slow in-flight request finish, then
// exits 0.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	slow := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		time.Sleep(800 * time.Millisecond)
		io.WriteString(w, "finished")
	})
	p := startPeerd(t, withProxy(directConfig, "shutdown_timeout = \"5s\""))
	done := make(chan result, 1)
	go func() { done <- do(p.client(), "GET", "http://"+slow+"/", "") }()
	<-arrived // the request is in flight at the origin
	p.signal(syscall.SIGTERM)
	if r := <-done; r.status != 200 {
		t.Fatalf("in-flight request during shutdown: %s", r)
	}
	p.exitsZero(10 * time.Second)
}

func TestAdminAPI(t *testing.T) {
	t.Parallel()
	a := newFakeParent(t, "a")
	s := newFakeParent(t, "s")
	p := startPeerd(t, baseConfig+health(1, "1h", "1h")+peerBlock(`login = "u:topsecret"`, a)+peerBlock(`type = "sibling"`, s))
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + p.admin + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	send := func(method, path, token, body string) (int, string) {
		req, _ := http.NewRequest(method, "http://"+p.admin+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	code, body := get("/peers")
	if code != 200 || !strings.Contains(body, `"name": "a"`) || strings.Index(body, `"name": "a"`) > strings.Index(body, `"name": "s"`) {
		t.Fatalf("/peers = %d %s", code, body)
	}
	for _, field := range []string{"state", "admin_state", "weight", "connect_fail_limit", "consecutive_failures", "connect_failures_total", "connects_total", "requests_total", "in_flight", "probes_total", "probe_failures_total", "deaths_total", "revivals_total", "last_failure", "last_success", "dead_since", "next_probe", "last_error", "suspect", "connect_time_ms"} {
		if !strings.Contains(body, `"`+field+`":`) {
			t.Errorf("PEER lacks %q", field)
		}
	}
	if strings.Contains(body, "topsecret") {
		t.Fatal("the API printed a login secret")
	}
	for _, tc := range []struct {
		method, path, token, body string
		want                      int
		contains                  string
	}{
		{"GET", "/peers/nope", "", "", 404, `"error"`},
		{"GET", "/peers?state=zombie", "", "", 400, "unknown state"},
		{"GET", "/peers?type=sibling", "", "", 200, `"name": "s"`},
		{"GET", "/healthz", "", "", 200, "ok"},
		{"PUT", "/peers/a/state", "", `{"admin_state":"drain"}`, 401, "token"},
		{"PUT", "/peers/a/state", "wrong", `{"admin_state":"drain"}`, 401, "token"},
		{"PUT", "/peers/a/state", "secret", `{"admin_state":"sleepy"}`, 400, "unknown admin_state"},
		{"PUT", "/peers/a/state", "secret", `{nope`, 400, "bad JSON"},
		{"PUT", "/peers/nope/state", "secret", `{"admin_state":"drain"}`, 404, "unknown peer"},
		{"PUT", "/peers/a/state", "secret", `{"admin_state":"drain"}`, 200, `"admin_state": "drain"`},
		{"POST", "/peers/a/probe", "secret", "", 200, `"probes_total": 2`},
		{"POST", "/peers/nope/probe", "secret", "", 404, "unknown peer"},
		{"GET", "/peers?color=red", "", "", 400, "unknown filter"},
		{"GET", "/no/such/endpoint", "", "", 404, "no such endpoint"},
		{"DELETE", "/peers/a", "secret", "", 405, "not allowed"},
		{"PUT", "/peers/a/state", "secret", `{"state":"drain"}`, 400, "bad JSON"},
		{"PUT", "/peers/a/state", "secret", `{}`, 400, "missing"},
	} {
		var code int
		var body string
		if tc.method == "GET" {
			code, body = get(tc.path)
		} else {
			code, body = send(tc.method, tc.path, tc.token, tc.body)
		}
		if code != tc.want || !strings.Contains(body, tc.contains) {
			t.Errorf("%s %s: %d %s; want %d containing %q", tc.method, tc.path, code, body, tc.want, tc.contains)
		}
	}
	// A drained parent gets no traffic: requests fail over (direct=never,
	// sibling misses) to 503.
	if r := do(p.client(), "GET", "http://o.test/", ""); r.status != 503 {
		t.Fatalf("request with the only parent drained: %s", r)
	}
	code, body = get("/peers?state=alive&type=parent")
	if code != 200 || !strings.Contains(body, `"name": "a"`) || strings.Contains(body, `"name": "s"`) {
		t.Fatalf("filter: %d %s", code, body)
	}
}

func TestAdminWritesRefusedWithoutToken(t *testing.T) {
	t.Parallel()
	a := newFakeParent(t, "a")
	p := startPeerd(t, strings.Replace(baseConfig, `token = "secret"`, "", 1)+peerBlock("", a))
	if code := p.adminJSON("POST", "/peers/a/probe", "anything", nil); code != 403 {
		t.Fatalf("write with no token configured = %d; want 403", code)
	}
}

func TestMetricsAndAccessLog(t *testing.T) {
	a := newFakeParent(t, "a")
	b := newFakeParent(t, "b")
	accessLog := t.TempDir() + "/access.log"
	p := startPeerd(t, strings.Replace(baseConfig, "[log]\n", fmt.Sprintf("[log]\naccess_log = %q\n", accessLog), 1)+health(1, "1h", "1h")+peerBlock("", a, b))
	c := p.client()
	for i := 0; i < 3; i++ {
		do(c, "GET", fmt.Sprintf("http://o.test/m%d", i), "")
	}
	a.stop()
	do(c, "GET", "http://o.test/after", "")
	waitFor(t, "a dead", 5*time.Second, func() bool { return p.peer("a").State == "dead" })

	resp, err := http.Get("http://" + p.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("metrics do not parse: %v", err)
	}
	value := func(name string, labels map[string]string) float64 {
		f := fams[name]
		if f == nil {
			t.Fatalf("no metric %s", name)
		}
	next:
		for _, m := range f.Metric {
			for k, v := range labels {
				found := false
				for _, lp := range m.Label {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			switch {
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
		t.Fatalf("no %s%v", name, labels)
		return 0
	}
	if v := value("peerd_peer_up", map[string]string{"peer": "a"}); v != 0 {
		t.Errorf(`peerd_peer_up{peer="a"} = %v; want 0`, v)
	}
	if v := value("peerd_peer_up", map[string]string{"peer": "b"}); v != 1 {
		t.Errorf(`peerd_peer_up{peer="b"} = %v; want 1`, v)
	}
	if v := value("peerd_peer_state_changes_total", map[string]string{"peer": "a", "to": "dead"}); v != 1 {
		t.Errorf("state changes to dead = %v; want 1", v)
	}
	if v := value("peerd_peer_connect_failures_total", map[string]string{"peer": "a"}); v != 1 {
		t.Errorf("connect failures = %v; want 1", v)
	}
	if v := value("peerd_requests_total", map[string]string{"code": "200", "hierarchy": "FIRSTUP_PARENT"}); v != 4 {
		t.Errorf("requests_total 200 FIRSTUP_PARENT = %v; want 4", v)
	}
	if v := value("peerd_retries_total", map[string]string{"reason": "connect_failed"}); v != 1 {
		t.Errorf("retries connect_failed = %v; want 1", v)
	}
	for _, name := range []string{"peerd_request_duration_seconds", "peerd_peer_requests_total", "peerd_peer_probes_total", "peerd_peer_in_flight", "peerd_retry_budget_exhausted_total", "peerd_peer_connect_time_seconds"} {
		if fams[name] == nil {
			t.Errorf("metric %s missing", name)
		}
	}

	// Access log: Squid native format, flushed on SIGUSR1-free shutdown.
	p.stop()
	data, err := os.ReadFile(accessLog)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d access log lines; want 4:\n%s", len(lines), data)
	}
	squidLine := regexp.MustCompile(`^\d+\.\d{3} +\d+ 127\.0\.0\.1 TCP_MISS/200 \d+ GET http://o\.test/m0 - FIRSTUP_PARENT/127\.0\.0\.1 text/plain$`)
	if !squidLine.MatchString(lines[0]) {
		t.Fatalf("access log line %q is not in Squid's native format", lines[0])
	}
	if !bytes.Contains(data, []byte("GET http://o.test/after - FIRSTUP_PARENT/127.0.0.1")) {
		t.Fatalf("failover request not logged:\n%s", data)
	}
}

func TestAccessLogReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := dir + "/access.log"
	origin := newOrigin(t, originHandler)
	p := startPeerd(t, directConfig+fmt.Sprintf("[log]\naccess_log = %q\n", path))
	do(p.client(), "GET", "http://"+origin+"/one", "")
	waitFor(t, "flush", 5*time.Second, func() bool { b, _ := os.ReadFile(path); return len(b) > 0 })
	os.Rename(path, path+".1")
	p.signal(syscall.SIGUSR1)
	waitFor(t, "reopen", 5*time.Second, func() bool { return countLog(p, "access log reopened") == 1 })
	do(p.client(), "GET", "http://"+origin+"/two", "")
	waitFor(t, "new file", 5*time.Second, func() bool { b, _ := os.ReadFile(path); return bytes.Contains(b, []byte("/two")) })
	if b, _ := os.ReadFile(path + ".1"); bytes.Contains(b, []byte("/two")) {
		t.Fatal("wrote to the rotated file after SIGUSR1")
	}
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	run := func(args ...string) (int, string) {
		cmd := osexec.Command(peerdBin, args...)
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	if code, out := run("-version"); code != 0 || !strings.HasPrefix(out, "peerd ") {
		t.Fatalf("-version: %d %q", code, out)
	}
	if code, _ := run("-check", "-config", "../etc/peerd.toml"); code != 0 {
		t.Fatalf("-check etc/peerd.toml: exit %d", code)
	}
	bad := t.TempDir() + "/bad.toml"
	os.WriteFile(bad, []byte("[proxy]\nlisten = \"x\"\nbogus = 1\n[[peer]]\nport = 0\n"), 0o644)
	code, out := run("-check", "-config", bad)
	if code != 1 || strings.Count(out, "\n") < 4 {
		t.Fatalf("-check bad: exit %d\n%s", code, out)
	}
	code, out = run("-config", bad)
	if code != 1 || !strings.Contains(out, "proxy.bogus: unknown key") {
		t.Fatalf("start with bad config: exit %d %q", code, out)
	}
	// Port in use: exit 2 with a one-line reason.
	busy := newFakeParent(t, "busy")
	good := t.TempDir() + "/good.toml"
	os.WriteFile(good, []byte(fmt.Sprintf("[proxy]\nlisten = %q\n[admin]\nlisten = \"127.0.0.1:0\"\n", busy.addr)), 0o644)
	code, out = run("-config", good)
	if code != 2 || !strings.Contains(out, "address already in use") {
		t.Fatalf("port in use: exit %d %q", code, out)
	}
}

// TestSecondSignalExitsAtOnce: during a graceful shutdown that waits for a
// slow request, a second SIGTERM ends peerd at once.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	arrived := make(chan struct{}, 1)
	slow := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-time.After(20 * time.Second):
		}
	})
	p := startPeerd(t, withProxy(directConfig, "shutdown_timeout = \"30s\""))
	go do(p.client(), "GET", "http://"+slow+"/", "")
	<-arrived // the request is in flight at the origin
	p.signal(syscall.SIGTERM)
	// The first signal starts a graceful wait: peerd logs it and stays.
	waitFor(t, "the graceful wait", 5*time.Second, func() bool { return countLog(p, "shutting down") == 1 })
	select {
	case <-p.exited:
		t.Fatal("exited while a request was in flight; want a graceful wait")
	case <-time.After(300 * time.Millisecond):
	}
	start := time.Now()
	p.signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		t.Fatal("a second SIGTERM did not end peerd")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("second signal took %v", d)
	}
}

// TestWorkerThreadsFollowTheLoad: an idle peerd on more than one core
// gives up all but one worker thread (internal/procs), and says so in
// the Go collector's gauge, without the operator setting GOMAXPROCS.
// The way back up is internal/procs' own test, on a fake clock.
func TestWorkerThreadsFollowTheLoad(t *testing.T) {
	t.Parallel()
	if runtime.NumCPU() < 2 {
		t.Skip("one core: there is no thread to give up")
	}
	a := newFakeParent(t, "a")
	p := startPeerd(t, baseConfig+peerBlock("", a))
	if r := do(p.client(), "GET", "http://o.test/before", ""); r.status != http.StatusOK {
		t.Fatalf("GET before: %v", r)
	}
	waitFor(t, "go_sched_gomaxprocs_threads 1 when idle", 10*time.Second, func() bool {
		return metricValue(p.adminMetrics(), "go_sched_gomaxprocs_threads") == 1
	})
	if !strings.Contains(p.logs(), "worker threads follow the load") {
		t.Errorf("no debug line on the change in the log")
	}
	if r := do(p.client(), "GET", "http://o.test/after", ""); r.status != http.StatusOK {
		t.Errorf("GET on one thread: %v", r)
	}
}
