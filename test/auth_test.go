package e2e

// Basic authentication through the binary (issue 25): 407 without or with
// wrong credentials, SHA-512-crypt and apr1 users, wrong passwords slowed
// while the right one works, the user in the access log, no secret in
// any log, login = PASS.

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const (
	usersSHA512 = `carol:$6$saltsalt$Vd2b/4Dxg.2QfZEXUzBTWCPk7eyodBwe9Y1uDVney3aHpmOzQhTuZJtKMY1uJH3BDnIJkk.d5TRGUEcZTtKNW.` // s3cret-512
	usersAPR1   = `erin:$apr1$aprsalt$7qTYE0FQzI2BE0eyEavkD0`                                                                // s3cret-apr1
	usersSHA256 = `dave:$5$salt5$MbuG.3mBwuxA57eb7NJhBukerQOBR.d19oIxnvaYtt8`                                                // s3cret-256
)

func basicAuth(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

func TestBasicAuthThroughTheBinary(t *testing.T) {
	t.Parallel()
	a := newFakeParent(t, "a")
	users := filepath.Join(t.TempDir(), "users")
	os.WriteFile(users, []byte(usersSHA512+"\n"+usersAPR1+"\n"+usersSHA256+"\n"), 0o600)
	cfg := baseConfig + fmt.Sprintf("\n[auth]\nbasic_users = %q\nrealm = \"test realm\"\n", users) + peerBlock("", a)
	p := startPeerd(t, cfg)
	send := func(auth string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://o.test/x", nil)
		if auth != "" {
			req.Header.Set("Proxy-Authorization", auth)
		}
		u, _ := url.Parse("http://" + p.proxy)
		resp, err := (&http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	r := send("")
	if r.StatusCode != 407 || r.Header.Get("Proxy-Authenticate") != `Basic realm="test realm"` || r.Header.Get("X-Peerd-Error") != "auth-required" {
		t.Fatalf("no credentials: %d %q %q; want 407 with a Basic challenge", r.StatusCode, r.Header.Get("Proxy-Authenticate"), r.Header.Get("X-Peerd-Error"))
	}
	// A challenge is a refusal (RFC 9209), not a fault of peerd's.
	if ps := r.Header.Get("Proxy-Status"); !strings.Contains(ps, "error=http_request_denied") {
		t.Fatalf("the 407's Proxy-Status %q; want error=http_request_denied", ps)
	}
	if r := send(basicAuth("carol", "wrong-password")); r.StatusCode != 407 {
		t.Fatalf("a wrong password: %d; want 407", r.StatusCode)
	}
	for user, pass := range map[string]string{"carol": "s3cret-512", "erin": "s3cret-apr1"} {
		if r := send(basicAuth(user, pass)); r.StatusCode != 200 {
			t.Fatalf("%s with the right password: %d; want 200", user, r.StatusCode)
		}
	}
	// Many wrong passwords: slowed (429). A right guess while the source
	// is over its allowance is refused too (it is not even hashed), and
	// works once the allowance refills; carol's credential, verified
	// before, works throughout.
	codes := map[int]int{}
	for i := 0; i < 12; i++ {
		codes[send(basicAuth("dave", fmt.Sprintf("guess-%d", i))).StatusCode]++
	}
	if codes[429] == 0 {
		t.Fatalf("12 wrong passwords answered %v; want some 429", codes)
	}
	if r := send(basicAuth("dave", "s3cret-256")); r.StatusCode != 429 {
		t.Fatalf("the right password right after many wrong ones: %d; want 429", r.StatusCode)
	}
	if r := send(basicAuth("carol", "s3cret-512")); r.StatusCode != 200 {
		t.Fatalf("carol's verified credential from the guessing source: %d; want 200", r.StatusCode)
	}
	waitFor(t, "the right password once the allowance refilled", 15*time.Second, func() bool {
		return send(basicAuth("dave", "s3cret-256")).StatusCode == 200
	})
	// The parent never sees the client's credentials.
	if strings.Contains(fmt.Sprint(a.records()), "s3cret") {
		t.Fatal("a credential reached the parent")
	}
	p.stop()
	logs := p.logs()
	access, _ := os.ReadFile(p.accessLog)
	for _, secret := range []string{"s3cret-512", "s3cret-apr1", "guess-1", base64.StdEncoding.EncodeToString([]byte("carol:s3cret-512")), "Vd2b/4Dxg"} {
		if strings.Contains(logs, secret) || strings.Contains(string(access), secret) {
			t.Fatalf("the secret %q is in a log", secret)
		}
	}
	// As Squid logs them: refusals are TCP_DENIED, and a wrong credential
	// names the user it tried (never the password: checked above).
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`TCP_MISS/200 \d+ GET http://o\.test/x carol `),
		regexp.MustCompile(`TCP_DENIED/407 \d+ GET http://o\.test/x - HIER_NONE/- `),
		regexp.MustCompile(`TCP_DENIED/407 \d+ GET http://o\.test/x carol HIER_NONE/- `),
		regexp.MustCompile(`TCP_DENIED/429 \d+ GET http://o\.test/x dave HIER_NONE/- `),
	} {
		if !want.Match(access) {
			t.Errorf("no access log line matches %s:\n%s", want, access)
		}
	}
	if bytes.Contains(access, []byte("NONE_NONE/407")) || bytes.Contains(access, []byte("proxy_internal_error")) {
		t.Errorf("an auth refusal logged as peerd's own error:\n%s", access)
	}
}

// TestLoginPass: login = "PASS" sends the client's own credentials to
// that peer, and only to it.
func TestLoginPass(t *testing.T) {
	t.Parallel()
	a := newFakeParent(t, "a")
	p := startPeerd(t, baseConfig+peerBlock(`login = "PASS"`+"\ntls = false", a))
	req, _ := http.NewRequest("GET", "http://o.test/pass", nil)
	req.Header.Set("Proxy-Authorization", basicAuth("alice", "her-own"))
	u, _ := url.Parse("http://" + p.proxy)
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "auth="+basicAuth("alice", "her-own")) {
		t.Fatalf("the PASS parent saw %q; want the client's own credentials", b)
	}
	if !strings.Contains(p.logs(), "login is sent in clear text") {
		t.Fatal("no warning for a login without tls")
	}
}

// TestUsersInRulesAndRoutes: the authenticated user is what [[rule]] and
// [[route]] users match: one user is refused a domain, another is routed
// to her own parent, and everyone else takes the default path.
func TestUsersInRulesAndRoutes(t *testing.T) {
	t.Parallel()
	a, b := newFakeParent(t, "a"), newFakeParent(t, "b")
	users := filepath.Join(t.TempDir(), "users")
	os.WriteFile(users, []byte(usersSHA512+"\n"+usersAPR1+"\n"), 0o600)
	cfg := baseConfig + fmt.Sprintf("\n[auth]\nbasic_users = %q\n", users) + peerBlock("", a, b) + `
[[route]]
users = ["carol"]
peers = ["b"]
[[route]]
peers = ["a"]
[[rule]]
action = "deny"
users = ["erin"]
domains = [".private.test"]
`
	p := startPeerd(t, cfg)
	u, _ := url.Parse("http://" + p.proxy)
	cl := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}, Timeout: 10 * time.Second}
	get := func(target, user, pass string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", target, nil)
		req.Header.Set("Proxy-Authorization", basicAuth(user, pass))
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("X-Parent"), string(body)
	}
	if code, _, body := get("http://www.private.test/x", "erin", "s3cret-apr1"); code != 403 || !strings.Contains(body, p.ruleRef(1)) {
		t.Fatalf("erin to private.test: %d %q; want 403 by %s", code, body, p.ruleRef(1))
	}
	if code, from, _ := get("http://www.private.test/x", "carol", "s3cret-512"); code != 200 || from != "b" {
		t.Fatalf("carol to private.test: %d from %q; want 200 from her route's parent b", code, from)
	}
	if code, from, _ := get("http://o.test/x", "erin", "s3cret-apr1"); code != 200 || from != "a" {
		t.Fatalf("erin to o.test: %d from %q; want 200 from a", code, from)
	}
}
