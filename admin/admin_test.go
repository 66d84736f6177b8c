package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus/hooks/test"
)

type fakeProber struct {
	reg   *peers.Registry
	calls int
}

func (f *fakeProber) ProbeNow(_ context.Context, name string) (*peers.Peer, error) {
	f.calls++
	p := f.reg.Get(name)
	if p == nil {
		return nil, peers.ErrUnknownPeer
	}
	f.reg.Observe(p, peers.Outcome{At: time.Now(), Probe: true, RTT: time.Millisecond})
	return p, nil
}

func newAPI(t *testing.T, token string) (*API, *peers.Registry, *fakeProber, *int) {
	t.Helper()
	log, _ := test.NewNullLogger()
	reg, err := peers.New(peers.Options{Health: peers.DefaultConfig(), Log: log}, []peers.Spec{
		{Name: "p1", Host: "10.0.0.1", Port: 3128, Login: "u:secret"},
		{Name: "s1", Host: "10.0.0.2", Port: 3128, Type: peers.Sibling},
	})
	if err != nil {
		t.Fatal(err)
	}
	pr := &fakeProber{reg: reg}
	reloads := 0
	promReg := prometheus.NewRegistry()
	promReg.MustRegister(NewPeerCollector(reg))
	api := New(Options{Registry: reg, Prober: pr, Reload: func() (ReloadDiff, error) {
		reloads++
		if reloads > 1 {
			return ReloadDiff{}, errors.New("line 3: proxy.bogus: unknown key")
		}
		return ReloadDiff{Kept: []string{"p1"}}, nil
	}, Explain: selection.New(reg, selection.Options{}).Explain, Gatherer: promReg, Log: log,
		Listen: "127.0.0.1:3180", Hosts: []string{"example.com"}}, token) // httptest's requests name example.com
	return api, reg, pr, &reloads
}

func call(t *testing.T, h http.Handler, method, path, token, body string) (int, string) {
	t.Helper()
	auth := ""
	if token != "" {
		auth = "Bearer " + token
	}
	return callAuth(t, h, method, path, auth, body)
}

// TestReloadAndMetrics: what only a unit test with fakes can see; every
// endpoint's contract is tested through the binary (test/ops_test.go
// TestAdminAPI). A refused reload's message reaches the operator, and the
// per-peer metrics follow the registry.
func TestReloadAndMetrics(t *testing.T) {
	api, _, pr, reloads := newAPI(t, "tok")
	for _, tc := range []struct {
		method, path, token string
		want                int
		contains            string
	}{
		{"POST", "/reload", "tok", 200, "reloaded"},
		{"POST", "/reload", "tok", 400, "line 3: proxy.bogus: unknown key"},
		{"GET", "/metrics", "", 200, `peerd_peer_up{peer="p1"} 0`},
		{"POST", "/peers/p1/probe", "tok", 200, `"state": "alive"`},
		{"GET", "/metrics", "", 200, `peerd_peer_up{peer="p1"} 1`},
	} {
		code, body := call(t, api, tc.method, tc.path, tc.token, "")
		if code != tc.want || !strings.Contains(body, tc.contains) {
			t.Errorf("%s %s: %d %s; want %d containing %q", tc.method, tc.path, code, body, tc.want, tc.contains)
		}
		if strings.Contains(body, "secret") {
			t.Errorf("%s %s printed the login secret", tc.method, tc.path)
		}
	}
	if pr.calls != 1 || *reloads != 2 {
		t.Errorf("probes %d reloads %d; want 1 and 2", pr.calls, *reloads)
	}
}

// TestSetToken: a token set on reload takes effect at once (refusal with
// no token configured is tested through the binary).
func TestSetToken(t *testing.T) {
	api, _, pr, _ := newAPI(t, "")
	if code, _ := call(t, api, "POST", "/peers/p1/probe", "new", ""); code != 403 || pr.calls != 0 {
		t.Fatalf("with no token configured: %d, %d probes; want 403 and none", code, pr.calls)
	}
	api.SetToken("new")
	if code, _ := call(t, api, "POST", "/peers/p1/probe", "new", ""); code != 200 {
		t.Errorf("after SetToken: %d; want 200", code)
	}
}

// callAuth sends a request with a raw Authorization header.
func callAuth(t *testing.T, h http.Handler, method, path, auth, body string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.RemoteAddr = "192.0.2.9:4444"
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, string(b)
}

func TestHardening(t *testing.T) {
	api, _, _, _ := newAPI(t, "tok")
	for _, tc := range []struct {
		name, auth, body string
		want             int
		contains         string
	}{
		{"lower-case scheme", "bearer tok", `{"admin_state":"drain"}`, 200, `"admin_state": "drain"`},
		{"upper-case scheme", "BEARER tok", `{"admin_state":"enabled"}`, 200, `"admin_state": "enabled"`},
		{"basic scheme", "Basic tok", `{"admin_state":"drain"}`, 401, "bearer token"},
		{"junk after the value", "Bearer tok", `{"admin_state":"drain"} junk`, 400, "after the value"},
		{"two values", "Bearer tok", `{"admin_state":"drain"}{"admin_state":"drain"}`, 400, "after the value"},
		{"too large", "Bearer tok", `{"admin_state":"drain","x":"` + strings.Repeat("a", 1<<20) + `"}`, 413, "1 MiB"},
	} {
		code, body := callAuth(t, api, "PUT", "/peers/p1/state", tc.auth, tc.body)
		if code != tc.want || !strings.Contains(body, tc.contains) {
			t.Errorf("%s: %d %s; want %d containing %q", tc.name, code, body, tc.want, tc.contains)
		}
	}
}

// TestFailedTokensLimited: a source that keeps guessing is slowed to one
// attempt a second after a burst of 5; others are not affected, and time
// restores it.
//
// (A source past its allowance is refused before its token is compared,
// so a guesser's many connections buy it nothing.)
func TestFailedTokensLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, _, _, _ := newAPI(t, "tok")
		codes := ""
		for i := 0; i < 7; i++ {
			code, _ := callAuth(t, api, "POST", "/peers/p1/probe", "Bearer guess", "")
			codes += fmt.Sprint(code, " ")
		}
		if codes != "401 401 401 401 401 429 429 " {
			t.Fatalf("guesses answered %s; want 5 x 401 then 429", codes)
		}
		req := httptest.NewRequest("POST", "/peers/p1/probe", nil)
		req.RemoteAddr = "198.51.100.1:1"
		req.Header.Set("Authorization", "Bearer tok")
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Fatalf("another source: %d; want 200", rec.Code)
		}
		// The guessing source's next attempt is refused before its token is
		// looked at, the right one too; once a second gave one attempt
		// back, the right token works.
		if code, _ := callAuth(t, api, "POST", "/peers/p1/probe", "Bearer tok", ""); code != 429 {
			t.Fatalf("the right token from the guessing source: %d; want 429 until its allowance refills", code)
		}
		time.Sleep(time.Second)
		if code, _ := callAuth(t, api, "POST", "/peers/p1/probe", "Bearer tok", ""); code != 200 {
			t.Fatalf("the right token once a second passed: %d; want 200", code)
		}
		// Rotating addresses does not escape the API-wide allowance: the
		// guesses answered at once are bounded by its burst and rate.
		slowed, fast := 0, 0
		time.Sleep(time.Minute) // every allowance full again
		begin := time.Now()
		for i := 0; i < 4*guardAllBurst; i++ {
			req := httptest.NewRequest("POST", "/peers/p1/probe", nil)
			req.RemoteAddr = fmt.Sprintf("203.0.113.%d:1", i%250)
			req.Header.Set("Authorization", "Bearer guess")
			rec := httptest.NewRecorder()
			api.ServeHTTP(rec, req)
			if rec.Code == 429 {
				slowed++
			} else {
				fast++
			}
		}
		limit := guardAllBurst + int(time.Since(begin).Seconds()*float64(guardAllRate)) + 1
		if slowed == 0 || fast > limit {
			t.Fatalf("%d guesses from rotating addresses answered at once in %v (%d slowed); want at most %d", fast, time.Since(begin), slowed, limit)
		}
	})
}

// FuzzStateBody feeds arbitrary bodies to PUT /peers/{name}/state: never a
// panic, only 200, 400 or 413, and the peer's admin state changes only on
// a 200, to the state the body named.
func FuzzStateBody(f *testing.F) {
	for _, s := range []string{`{"admin_state":"drain"}`, `{"admin_state":"enabled"} x`, `{"admin_state":1}`, `[`, ``, `{"admin_state":"maintenance","extra":1}`, `null`, `{"admin_state":null}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		api, reg, _, _ := newAPI(t, "tok")
		before := reg.Get("p1").Health().AdminState()
		code, out := call(t, api, "PUT", "/peers/p1/state", "tok", body)
		after := reg.Get("p1").Health().AdminState()
		switch code {
		case 200:
			var want struct {
				AdminState string `json:"admin_state"`
			}
			if err := decodeJSON([]byte(body), &want); err != nil || want.AdminState != after.String() {
				t.Fatalf("200 for %q, state %s", body, after)
			}
		case 400, 413:
			if after != before {
				t.Fatalf("%d for %q but the state changed to %s", code, body, after)
			}
			if !strings.Contains(out, `"error"`) {
				t.Fatalf("%d without an error message: %s", code, out)
			}
		default:
			t.Fatalf("%d for %q", code, body)
		}
	})
}

// TestIncidentEndpoints: the state with a reason and ttl, the history,
// the plan and the audit of writes.
func TestIncidentEndpoints(t *testing.T) {
	api, _, _, _ := newAPI(t, "tok")
	for _, tc := range []struct {
		method, path, token, body string
		want                      int
		contains                  []string
	}{
		{"PUT", "/peers/p1/state", "tok", `{"admin_state": "drain", "reason": "kernel upgrade", "ttl": "30m"}`, 200,
			[]string{`"admin_state": "drain"`, `"admin_reason": "kernel upgrade"`, `"admin_until": "20`, `"failures_by_class"`, `"flapping": false`}},
		{"PUT", "/peers/p1/state", "tok", `{"admin_state": "drain", "ttl": "soon"}`, 400, []string{`ttl`, `soon`}},
		{"PUT", "/peers/p1/state", "tok", `{"admin_state": "enabled", "ttl": "5m"}`, 400, []string{`ttl`}},
		{"PUT", "/peers/p1/state", "tok", `{"admin_state": "drain", "ttl": "2562047h"}`, 400, []string{`ttl`, `longer than`}},
		{"GET", "/peers/p1/history", "", "", 200, []string{`"transitions"`, `"from": "enabled"`, `"to": "drain"`, `"cause": "admin"`}},
		{"GET", "/peers/nope/history", "", "", 404, []string{"nope"}},
		{"GET", "/plan?url=http://example.com/x", "", "", 200, []string{`"hops"`, `"skipped"`, `"peer": "p1"`}},
		{"GET", "/plan", "", "", 400, []string{"url"}},
		{"GET", "/plan?url=ftp://x/", "", "", 400, []string{"ftp://x/"}},
		{"GET", "/plan?url=http://x/&method=get", "", "", 400, []string{"method"}},
		{"GET", "/plan?url=http://x/&client=10.0.0.300", "", "", 400, []string{`client \"10.0.0.300\" is not an IP address`}},
		{"GET", "/audit", "", "", 200, []string{`"path": "/peers/p1/state"`, `"from": "enabled"`, `"to": "drain"`, `"reason": "kernel upgrade"`, `"remote"`}},
	} {
		code, body := call(t, api, tc.method, tc.path, tc.token, tc.body)
		if code != tc.want {
			t.Errorf("%s %s %s: %d %s; want %d", tc.method, tc.path, tc.body, code, body, tc.want)
			continue
		}
		for _, c := range tc.contains {
			if !strings.Contains(body, c) {
				t.Errorf("%s %s: %s; want it to contain %q", tc.method, tc.path, body, c)
			}
		}
	}
	// Refused writes are not audited.
	_, body := call(t, api, "GET", "/audit", "", "")
	if n := strings.Count(body, `"path"`); n != 1 {
		t.Fatalf("audit has %d entries; want 1 (the refused writes are not writes): %s", n, body)
	}
}

// TestHostGuard: reads and writes answer only to the listen address, a
// loopback address, localhost and [admin] hosts; any other name (a page
// that rebinds its own name to 127.0.0.1) gets 421.
func TestHostGuard(t *testing.T) {
	api, _, _, _ := newAPI(t, "tok")
	api.SetHosts("127.0.0.1:3180", []string{"Peerd.Internal."})
	for host, want := range map[string]int{
		"127.0.0.1:3180": 200, "localhost:3180": 200, "LOCALHOST": 200, "[::1]:3180": 200, "peerd.internal:3180": 200,
		"": 200, "evil.example": 421, "evil.example:3180": 421, "127.0.0.1.evil.example": 421, "10.0.0.5:3180": 421,
	} {
		req := httptest.NewRequest("GET", "/peers", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("Host %q: %d; want %d", host, rec.Code, want)
		}
	}
	// Listening on every address, any address literal is answered (it is
	// no name to rebind); names still are not.
	api.SetHosts("0.0.0.0:3180", nil)
	for host, want := range map[string]int{"10.0.0.5:3180": 200, "evil.example": 421} {
		req := httptest.NewRequest("GET", "/healthz", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("listening on 0.0.0.0, Host %q: %d; want %d", host, rec.Code, want)
		}
	}
}
