package e2e

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// result is what a client got for one request.
type result struct {
	status int
	code   string // X-Peerd-Error
	from   string // X-Parent: which fake parent answered
	err    error  // transport error (e.g. truncated body)
}

func (r result) String() string {
	if r.err != nil {
		return "error"
	}
	s := fmt.Sprint(r.status)
	if r.code != "" {
		s += " " + r.code
	}
	if r.from != "" {
		s += " from " + r.from
	}
	return s
}

func do(c *http.Client, method, u, body string) result {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, u, rd)
	resp, err := c.Do(req)
	if err != nil {
		return result{err: err}
	}
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	return result{status: resp.StatusCode, code: resp.Header.Get("X-Peerd-Error"), from: resp.Header.Get("X-Parent"), err: err}
}

// TestFaultClasses sends a GET and a POST through peerd to a faulty parent
// "bad" with a healthy fallback "good", for each failure class: what the
// client gets, whether it was retried, whether it counted as a connect
// failure, and that no POST ever reached any parent twice.
func TestFaultClasses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		mode          string // fake parent fault; "stopped" refuses (TestBlackholedParent drops SYNs)
		status        int
		extra         string // [proxy] keys
		wantGET       string
		wantPOST      string
		connectFailed bool // the fault counts as connect failures on bad
	}{
		{name: "refused", mode: "stopped", wantGET: "200 from good", wantPOST: "200 from good", connectFailed: true},
		// Whether the POST's write fails first (nothing written: retried) or
		// its read does (maybe processed: 502) is the kernel's race; both
		// are safe, and the POST is never sent twice either way.
		{name: "close without reading", mode: "close-at-once", wantGET: "200 from good", wantPOST: "502 bad-gateway|200 from good"},
		{name: "read then reset", mode: "reset-after-read", wantGET: "200 from good", wantPOST: "502 bad-gateway"},
		{name: "half headers then reset", mode: "half-headers", wantGET: "200 from good", wantPOST: "502 bad-gateway"},
		{name: "503 passed through", status: 503, wantGET: "503 from bad", wantPOST: "503 from bad"},
		{name: "503 retried when configured", status: 503, extra: "retry_on_status = [503]", wantGET: "200 from good", wantPOST: "503 from bad"},
		{name: "502 retried by default", status: 502, wantGET: "200 from good", wantPOST: "502 from bad"},
		{name: "silent: timeout retried like 504", mode: "silent", extra: `read_timeout = "500ms"`, wantGET: "200 from good", wantPOST: "504 timeout"},
		{name: "hang after headers: truncated, not retried", mode: "hang", extra: `read_timeout = "500ms"`, wantGET: "error", wantPOST: "error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := newFakeParent(t, "bad")
			good := newFakeParent(t, "good")
			badBlock := peerBlock(`connect_timeout = "300ms"`, bad)
			// Answer failures off: a broken answer would make bad suspect
			// and send the POST to good; this test is about the retry
			// classes on bad itself (gray_test.go covers the judging).
			cfg := withProxy(baseConfig, tc.extra) + `
[health]
connect_fail_limit = 100
answer_fail_limit = 0
probe_interval = "1m"
probe_max_interval = "1m"
` + badBlock + peerBlock("", good)
			p := startPeerd(t, cfg)
			switch tc.mode {
			case "stopped":
				bad.stop()
			case "":
			default:
				bad.setMode(tc.mode)
			}
			if tc.status != 0 {
				bad.setStatus(tc.status)
			}
			c := p.client()
			c.Timeout = 5 * time.Second
			oneOf := func(got, want string) bool {
				for _, w := range strings.Split(want, "|") {
					if got == w {
						return true
					}
				}
				return false
			}
			if got := do(c, "GET", "http://origin.test/g", "").String(); !oneOf(got, tc.wantGET) {
				t.Errorf("GET: %s; want %s", got, tc.wantGET)
			}
			if got := do(c, "POST", "http://origin.test/p", "payload").String(); !oneOf(got, tc.wantPOST) {
				t.Errorf("POST: %s; want %s", got, tc.wantPOST)
			}
			if n := bad.requests("POST") + good.requests("POST"); n > 1 {
				t.Errorf("the POST reached parents %d times; never more than once", n)
			}
			st := p.peer("bad")
			if tc.connectFailed != (st.ConnectFailuresTotal > 0) {
				t.Errorf("connect_failures_total = %d; connect failure expected: %v", st.ConnectFailuresTotal, tc.connectFailed)
			}
		})
	}
}

// TestReadTimeoutCountsFromTheRequest: a parent that takes a request and
// says nothing is given up read_timeout after the request went out, as
// the contract words it ("no bytes from the next hop for this long"), not
// from the end of the first wait (watchAfter, a second), which would give
// 2.5 s here.
func TestReadTimeoutCountsFromTheRequest(t *testing.T) {
	bad := newFakeParent(t, "bad")
	p := startPeerd(t, withProxy(baseConfig, `read_timeout = "1500ms"`)+`
[health]
answer_fail_limit = 0
`+peerBlock("", bad))
	bad.setMode("silent")
	c := p.client()
	c.Timeout = 10 * time.Second
	start := time.Now()
	got := do(c, "POST", "http://origin.test/p", "payload").String()
	took := time.Since(start)
	if got != "504 timeout" {
		t.Fatalf("POST to a silent parent: %s; want 504 timeout", got)
	}
	if took < 1500*time.Millisecond || took > 2200*time.Millisecond {
		t.Fatalf("504 after %v; want read_timeout (1.5s) after the request went out", took)
	}
}

// TestBlackholedParent: connects to a parent that drops SYNs time out
// after its connect_timeout, count as connect failures, and the request is
// served by the next parent.
func TestBlackholedParent(t *testing.T) {
	good := newFakeParent(t, "good")
	bad := newFakeParent(t, "bad")
	p := startPeerd(t, baseConfig+`
[health]
connect_fail_limit = 2
probe_interval = "200ms"
probe_max_interval = "200ms"
probe_timeout = "300ms"
`+peerBlock(`connect_timeout = "300ms"`, bad)+peerBlock("", good))
	// bad was probed alive; now its address drops SYNs.
	bad.stop()
	blackholeAt(t, bad.addr)
	c := p.client()
	for i := 0; i < 3; i++ {
		start := time.Now()
		r := do(c, "GET", "http://origin.test/b", "")
		if r.String() != "200 from good" {
			t.Fatalf("GET %d: %s", i, r)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("GET %d took %v", i, d)
		}
	}
	waitFor(t, "bad dead", 5*time.Second, func() bool { return p.peer("bad").State == "dead" })
	st := p.peer("bad")
	if st.LastError == nil || !strings.Contains(*st.LastError, "timeout") {
		t.Fatalf("last_error = %v; want a connect timeout", st.LastError)
	}
}

// TestStaleKeepAlive: the parent closes a pooled connection just as the
// next request arrives (write accepted, read fails). Clients see no error:
// a GET is retried on a fresh connection, and a POST never uses a pooled
// connection at all.
func TestStaleKeepAlive(t *testing.T) {
	t.Parallel()
	a := newFakeParent(t, "a")
	p := startPeerd(t, baseConfig+peerBlock("", a))
	a.setMode("stale-second")
	c := p.client()
	for i := 0; i < 5; i++ {
		if r := do(c, "GET", "http://origin.test/k", ""); r.String() != "200 from a" {
			t.Fatalf("GET %d: %s", i, r)
		}
		if r := do(c, "POST", "http://origin.test/k", "x"); r.String() != "200 from a" {
			t.Fatalf("POST %d: %s", i, r)
		}
	}
	if n := a.requests("POST"); n != 5 {
		t.Fatalf("parent processed %d POSTs; want exactly 5", n)
	}
	if st := p.peer("a"); st.ConnectFailuresTotal != 0 {
		t.Fatalf("a stale connection counted as a connect failure: %+v", st)
	}
}

// TestIdleClosingParent: a parent that closes keep-alive connections after
// 1s idle never causes a client error.
func TestIdleClosingParent(t *testing.T) {
	t.Parallel()
	a := newFakeParent(t, "a")
	p := startPeerd(t, baseConfig+peerBlock("", a))
	a.setMode("idle-close")
	c := p.client()
	for i := 0; i < 3; i++ {
		for _, m := range []string{"GET", "POST"} {
			if r := do(c, m, "http://origin.test/i", "x"); r.String() != "200 from a" {
				t.Fatalf("%s %d: %s", m, i, r)
			}
		}
		time.Sleep(1100 * time.Millisecond)
	}
}

// TestIdleConnectionReusedWithinPconnTimeout: a keep-alive connection to
// a parent that sat idle past its last request's first-byte timeout (the
// automatic one is 1 s before any answer times are known) is still reused
// within pconn_timeout. It used to be closed as broken: the expired
// deadline failed the look at it.
func TestIdleConnectionReusedWithinPconnTimeout(t *testing.T) {
	a := newFakeParent(t, "a")
	p := startPeerd(t, baseConfig+peerBlock("", a))
	c := p.client()
	for i, idle := range []time.Duration{0, 1500 * time.Millisecond} {
		time.Sleep(idle) // the idle spell under test, not a wait for something to happen
		if r := do(c, "GET", fmt.Sprintf("http://origin.test/idle%d", i), ""); r.String() != "200 from a" {
			t.Fatalf("GET %d: %s", i, r)
		}
	}
	var carried []int
	for _, r := range a.records() {
		if slices.Contains(r.Methods, "GET") {
			carried = append(carried, r.Requests)
		}
	}
	if len(carried) != 1 || carried[0] != 2 {
		t.Fatalf("GETs per parent connection %v; want both GETs on one connection", carried)
	}
}

// TestHedgedFailover: a parent whose host vanished (SYNs dropped) under
// steady load. The first request that picks it is answered by the next
// parent after the hedge delay; from then on the parent is suspect and no
// client waits for it; probes declare it dead. No client ever waits out
// the 1s connect timeout, and none sees an error.
func TestHedgedFailover(t *testing.T) {
	a := newFakeParent(t, "a")
	b := newFakeParent(t, "b")
	c := newFakeParent(t, "c")
	p := startPeerd(t, strings.Replace(baseConfig, `connect_timeout = "2s"`, `connect_timeout = "1s"`, 1)+health(3, "200ms", "500ms")+policy("round-robin")+peerBlock("", a, b, c))
	cl := p.client()
	for i := 0; i < 30; i++ { // warm: connect times known, pools filled
		do(cl, "GET", "http://o.test/warm", "")
	}
	a.stop()
	blackholeAt(t, a.addr)
	cl.CloseIdleConnections()
	var worst time.Duration
	deadline := time.Now().Add(4 * time.Second)
	n := 0
	for time.Now().Before(deadline) && p.peer("a").State != "dead" {
		start := time.Now()
		r := do(cl, "GET", fmt.Sprintf("http://o.test/h%d", n), "")
		d := time.Since(start)
		if r.status != 200 || r.from == "a" {
			t.Fatalf("request %d: %s", n, r)
		}
		worst = max(worst, d)
		n++
		time.Sleep(5 * time.Millisecond)
	}
	if st := p.peer("a"); st.State != "dead" {
		t.Fatalf("a = %+v; want dead by probes", st)
	}
	// The auto hedge delay here is its 50ms floor; allow a margin for a
	// loaded CI machine, far below the 1s connect timeout.
	if worst > 500*time.Millisecond {
		t.Fatalf("worst latency %v over %d requests; want about the 50ms hedge delay, far below the 1s connect timeout", worst, n)
	}
	t.Logf("%d requests during the outage, worst %v", n, worst)
}
