package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestDeadParentDetectedAndRevivedByProbe is the walking skeleton: a parent
// stops, is declared dead after connect_fail_limit failures while clients
// see no error, gets no request while dead, and on its return is revived by
// a probe (a connection without bytes) before any request reaches it.
func TestDeadParentDetectedAndRevivedByProbe(t *testing.T) {
	a := newFakeParent(t, "a")
	b := newFakeParent(t, "b")
	p := startPeerd(t, baseConfig+health(3, "200ms", "500ms")+policy("round-robin")+peerBlock("", a, b))
	c := p.client()
	// Both alive (probed at start): traffic is shared.
	for i := 0; i < 10; i++ {
		if r := do(c, "GET", "http://origin.test/x", ""); r.status != 200 {
			t.Fatalf("request %d: %s", i, r)
		}
	}
	if a.requests("GET") == 0 || b.requests("GET") == 0 {
		t.Fatalf("round-robin did not use both parents: a=%d b=%d", a.requests("GET"), b.requests("GET"))
	}

	a.stop()
	// Clients see no error: connect failures to a are retried on b.
	for i := 0; i < 10; i++ {
		if r := do(c, "GET", "http://origin.test/x", ""); r.String() != "200 from b" {
			t.Fatalf("request %d after a stopped: %s", i, r)
		}
	}
	// After its first failure a is suspect: plans put it behind b, and the
	// prober settles it; three consecutive failures in all make it dead.
	waitFor(t, "a dead", 5*time.Second, func() bool { return p.peer("a").State == "dead" })
	st := p.peer("a")
	if st.DeathsTotal != 1 || st.ConnectFailuresTotal < 3 {
		t.Fatalf("a = %+v; want dead after 3 failures", st)
	}
	waitFor(t, "the 'Detected DEAD Parent: a' log line", 5*time.Second, func() bool { return strings.Contains(p.logs(), "Detected DEAD Parent: a") })

	// Back on the same port, while clients keep sending: the first
	// connection a gets is a probe with no bytes (no live request is used
	// to find out whether a dead peer is back), and requests follow only
	// after it.
	stop := make(chan struct{})
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			do(c, "GET", "http://origin.test/during", "")
		}
	}()
	before := len(a.records())
	a.restart()
	waitFor(t, "a revived", 5*time.Second, func() bool { return p.peer("a").State == "alive" })
	revived := time.Now()
	close(stop)
	<-loaded
	recs := a.records()[before:]
	if len(recs) == 0 {
		t.Fatal("no connection reached a after its return; want the revival probe")
	}
	if recs[0].Bytes != 0 || recs[0].Requests != 0 {
		t.Fatalf("first connection after return carried %d bytes; want a probe (0 bytes)", recs[0].Bytes)
	}
	waitFor(t, "the 'Detected REVIVED Parent: a' log line", 5*time.Second, func() bool { return strings.Contains(p.logs(), "Detected REVIVED Parent: a") })
	for i := 0; i < 10; i++ {
		do(c, "GET", "http://origin.test/x", "")
	}
	if n := len(a.records()); n <= len(recs) {
		t.Fatalf("revived parent got no traffic (revived %v)", revived)
	}
}

func TestNoPeersAndConnectFailedErrors(t *testing.T) {
	t.Parallel()
	a := newFakeParent(t, "a")
	p := startPeerd(t, baseConfig+health(2, "10s", "10s")+peerBlock("", a))
	c := p.client()
	a.stop()
	// The first request fails to connect (502); probes then finish the
	// count at once, and with no live peer the answer is 503 without any
	// attempt, never the dead peer.
	check := func(want string) {
		t.Helper()
		resp, err := c.Get("http://origin.test/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := fmt.Sprintf("%d %s", resp.StatusCode, resp.Header.Get("X-Peerd-Error")); got != want {
			t.Fatalf("got %s; want %s", got, want)
		}
	}
	check("502 connect-failed")
	waitFor(t, "a dead", 5*time.Second, func() bool { return p.peer("a").State == "dead" })
	before := p.peer("a")
	check("503 no-peers")
	check("503 no-peers")
	after := p.peer("a")
	if got := after.ConnectFailuresTotal - after.ProbeFailuresTotal; got != 1 {
		t.Fatalf("%d client connects to a; want only the first", got)
	}
	if after.RequestsTotal != before.RequestsTotal {
		t.Fatal("a request was sent to the dead peer")
	}
}

func TestDirectByDefaultConfig(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "origin saw %s via=%q xff=%q", r.RequestURI, r.Header.Get("Via"), r.Header.Get("X-Forwarded-For"))
	})
	p := startPeerd(t, directConfig)
	resp, err := p.client().Get("http://" + origin + "/hello?x=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "origin saw /hello?x=1") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	host, _ := os.Hostname()
	if !strings.Contains(string(body), `via="1.1 `+host+` (peerd/`) || !strings.Contains(string(body), `xff="127.0.0.1"`) {
		t.Fatalf("missing Via/X-Forwarded-For: %s", body)
	}
	if v := resp.Header.Get("Via"); !strings.Contains(v, "peerd") {
		t.Fatalf("response Via = %q", v)
	}
}

// TestStartupWaitsForFirstVerdicts: the proxy port opens once every peer
// has a first probe verdict, so the first requests after a restart are
// served instead of failing; a peer that gives no verdict (SYNs dropped)
// holds the port back for at most its probe timeout.
func TestStartupWaitsForFirstVerdicts(t *testing.T) {
	a := newFakeParent(t, "a")
	hole := newFakeParent(t, "hole")
	hole.stop()
	blackholeAt(t, hole.addr)
	start := time.Now()
	p := startPeerd(t, baseConfig+`
[health]
probe_timeout = "1s"
`+peerBlock("", a, hole))
	took := time.Since(start)
	if took < 900*time.Millisecond || took > 10*time.Second {
		t.Fatalf("proxy port opened after %v; want after about the 1s probe timeout", took)
	}
	if st := p.peer("a"); st.State != "alive" {
		t.Fatalf("a = %s when the port opened; want alive", st.State)
	}
	if r := do(p.client(), "GET", "http://o.test/first", ""); r.String() != "200 from a" {
		t.Fatalf("first request: %s", r)
	}
	if st := p.peer("hole"); st.State == "alive" {
		t.Fatal("a black-holed peer is alive")
	}
}
