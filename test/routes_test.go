package e2e

// Routes, tiers and rules through the binary (issue 24): a [[route]]
// sends one domain to its own parent, a backup tier is used only when the
// primary tier is dead, a [[rule]] refuses with 403 naming itself before
// any parent sees the request, /plan names the rule, route and tier, and
// a reload puts new rules in force.

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRoutesTiersAndRules(t *testing.T) {
	t.Parallel()
	primary := newFakeParent(t, "primary")
	backup := newFakeParent(t, "backup")
	special := newFakeParent(t, "special")
	peersCfg := fmt.Sprintf(`
[[peer]]
name = "primary"
host = "127.0.0.1"
port = %s
connect_fail_limit = 1
[[peer]]
name = "backup"
host = "127.0.0.1"
port = %s
tier = 1
[[peer]]
name = "special"
host = "127.0.0.1"
port = %s
tier = 2
[[route]]
domains = [".special.test"]
peers = ["special"]
[[rule]]
action = "deny"
domains = [".blocked.test"]
[[rule]]
action = "deny"
methods = ["DELETE"]
`, primary.port(), backup.port(), special.port())
	cfg := baseConfig + "[cache]\nmemory = \"0\"\n" + health(1, "200ms", "1s") + peersCfg
	p := startPeerd(t, cfg)
	c := p.client()
	n := 0
	get := func(method, u string) (*http.Response, string) {
		t.Helper()
		n++
		req, _ := http.NewRequest(method, fmt.Sprintf("%s?n=%d", u, n), nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, u, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(body)
	}
	for i := 0; i < 5; i++ {
		if r, _ := get("GET", "http://o.test/x"); r.StatusCode != 200 || r.Header.Get("X-Parent") != "primary" {
			t.Fatalf("o.test: %d from %q; want 200 from the tier-0 parent", r.StatusCode, r.Header.Get("X-Parent"))
		}
		if r, _ := get("GET", "http://www.special.test/x"); r.StatusCode != 200 || r.Header.Get("X-Parent") != "special" {
			t.Fatalf("www.special.test: %d from %q; want 200 from the routed parent", r.StatusCode, r.Header.Get("X-Parent"))
		}
	}
	before := len(primary.records()) + len(backup.records()) + len(special.records())
	r, body := get("GET", "http://ads.blocked.test/x")
	if r.StatusCode != 403 || r.Header.Get("X-Peerd-Error") != "access-denied" || !strings.Contains(body, p.ruleRef(1)) {
		t.Fatalf("blocked domain: %d %q %q; want 403 access-denied naming %s", r.StatusCode, r.Header.Get("X-Peerd-Error"), body, p.ruleRef(1))
	}
	if r, body := get("DELETE", "http://o.test/x"); r.StatusCode != 403 || !strings.Contains(body, p.ruleRef(2)) {
		t.Fatalf("DELETE: %d %q; want 403 naming %s", r.StatusCode, body, p.ruleRef(2))
	}
	if after := len(primary.records()) + len(backup.records()) + len(special.records()); after != before {
		t.Fatalf("refused requests reached a parent (%d connections, was %d)", after, before)
	}

	// /plan names the rule, the route and each hop's tier.
	type plan struct {
		Denied string `json:"denied"`
		Rule   *int   `json:"rule"`
		Route  *int   `json:"route"`
		Hops   []struct {
			Peer string `json:"peer"`
			Tier int    `json:"tier"`
		} `json:"hops"`
	}
	var pl plan
	p.adminJSON("GET", "/plan?url="+url.QueryEscape("http://ads.blocked.test/"), "", &pl)
	if pl.Rule == nil || *pl.Rule != 0 || !strings.Contains(pl.Denied, "access-denied") {
		t.Fatalf("plan for a blocked domain: %+v; want denied by rule 0", pl)
	}
	pl = plan{}
	p.adminJSON("GET", "/plan?url="+url.QueryEscape("http://a.special.test/"), "", &pl)
	if pl.Route == nil || *pl.Route != 0 || len(pl.Hops) != 1 || pl.Hops[0].Peer != "special" || pl.Hops[0].Tier != 2 {
		t.Fatalf("plan for a routed domain: %+v; want route 0 with the special parent (tier 2) only", pl)
	}
	pl = plan{}
	p.adminJSON("GET", "/plan?url="+url.QueryEscape("http://o.test/"), "", &pl)
	if len(pl.Hops) < 2 || pl.Hops[0].Peer != "primary" || pl.Hops[1].Peer != "backup" || pl.Hops[1].Tier != 1 || pl.Route != nil {
		t.Fatalf("plan for an unrouted domain: %+v; want primary then backup (tier 1)", pl)
	}
	var st struct {
		Tier int `json:"tier"`
	}
	p.adminJSON("GET", "/peers/backup", "", &st)
	if st.Tier != 1 {
		t.Fatalf("/peers/backup tier = %d; want 1", st.Tier)
	}

	// The primary tier dies: the backup tier takes its requests, never the
	// tier-2 parent; special.test stays on its route.
	primary.stop()
	waitFor(t, "primary dead", 10*time.Second, func() bool {
		get("GET", "http://o.test/x")
		return p.peer("primary").State == "dead"
	})
	specialBefore := len(special.records())
	for i := 0; i < 5; i++ {
		if r, _ := get("GET", "http://o.test/x"); r.StatusCode != 200 || r.Header.Get("X-Parent") != "backup" {
			t.Fatalf("o.test with the primary dead: %d from %q; want 200 from the backup tier", r.StatusCode, r.Header.Get("X-Parent"))
		}
	}
	if got := len(special.records()); got != specialBefore {
		t.Fatalf("the tier-2 parent got %d connections while the backup tier was usable", got-specialBefore)
	}

	// A reload with the rules changed: ads.blocked.test is allowed now,
	// and www.other.test is refused.
	reloadConfig(t, p, strings.Replace(cfg, `domains = [".blocked.test"]`, `domains = [".other.test"]`, 1))
	p.signal(syscall.SIGHUP)
	waitFor(t, "reload", 5*time.Second, func() bool { return countLog(p, "config reloaded") == 1 })
	if r, _ := get("GET", "http://ads.blocked.test/x"); r.StatusCode != 200 {
		t.Fatalf("after the reload ads.blocked.test: %d; want 200", r.StatusCode)
	}
	if r, body := get("GET", "http://www.other.test/x"); r.StatusCode != 403 || !strings.Contains(body, p.ruleRef(1)) {
		t.Fatalf("after the reload www.other.test: %d %q; want 403 by %s", r.StatusCode, body, p.ruleRef(1))
	}
}

// TestRulesOnRequestFields: the keys import-squid carries Squid's
// browser, req_header and maxconn ACLs over with decide access in the
// running proxy as those ACLs would.
func TestRulesOnRequestFields(t *testing.T) {
	t.Parallel()
	par := newFakeParent(t, "a")
	cfg := baseConfig + peerBlock("", par) + `
[[rule]]
action = "deny"
user_agents = ["(?i)msie"]
[[rule]]
action = "deny"
max_conn = 2
[[rule]]
action = "deny"
headers = ["X-Team: ^guests$"]
`
	p := startPeerd(t, cfg)
	do := func(c *http.Client, header ...string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://o.test/fields", nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	c := p.client()
	if code := do(c, "User-Agent", "Mozilla/4.0 (compatible; MSIE 6.0)"); code != 403 {
		t.Fatalf("an MSIE browser: %d; want 403", code)
	}
	if code := do(c, "User-Agent", "curl/8", "X-Team", "ops"); code != 200 {
		t.Fatalf("curl from ops: %d; want 200", code)
	}
	if code := do(c, "X-Team", "guests"); code != 403 {
		t.Fatalf("X-Team: guests: %d; want 403", code)
	}
	// Three connections open from one address: more than max_conn 2.
	var held []net.Conn
	for range 2 {
		nc, err := net.Dial("tcp", p.proxy)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, nc)
	}
	// The two held connections are counted once peerd has accepted them.
	waitFor(t, "a request refused by max_conn", 5*time.Second, func() bool {
		u, _ := url.Parse("http://" + p.proxy)
		fresh := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), DisableKeepAlives: true}}
		return do(fresh) == 403
	})
	for _, nc := range held {
		nc.Close()
	}
	// (c, kept alive, holds one connection: a new client per try would
	// leave one more open each time, and stay over max_conn.)
	waitFor(t, "requests served again once the connections closed", 5*time.Second, func() bool {
		return do(c) == 200
	})
}
