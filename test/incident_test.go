package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Operating a hierarchy through the binary (contract sections 12 and 13):
// Proxy-Status emitted and read, failures by class, history, the plan,
// admin states with a ttl, the audit and the reload diff.

func (p *peerd) adminDo(method, path, token, body string) (int, string) {
	p.t.Helper()
	req, _ := http.NewRequest(method, "http://"+p.admin+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

func TestProxyStatus(t *testing.T) {
	t.Parallel()
	a := newFakeParent(t, "a")
	p := startPeerd(t, baseConfig+health(1, "1h", "1h")+peerBlock("", a))
	c := p.client()
	resp, err := c.Get("http://origin.test/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ps := resp.Header.Get("Proxy-Status"); ps != "peerd; next-hop=a; fwd-status=200" {
		t.Fatalf("Proxy-Status %q; want peerd's member naming a and its status", ps)
	}
	a.stop()
	resp, err = c.Get("http://origin.test/y")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ps := resp.Header.Get("Proxy-Status"); resp.StatusCode != 502 || !strings.HasPrefix(ps, "peerd; error=connection_refused; next-hop=a") {
		t.Fatalf("%d Proxy-Status %q; want 502 with error=connection_refused; next-hop=a", resp.StatusCode, ps)
	}
	resp, err = c.Get("http://origin.test/z") // a is dead now
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ps := resp.Header.Get("Proxy-Status"); resp.StatusCode != 503 || !strings.HasPrefix(ps, "peerd; error=destination_unavailable") {
		t.Fatalf("%d Proxy-Status %q; want 503 with error=destination_unavailable", resp.StatusCode, ps)
	}
	var st struct {
		FailuresByClass map[string]int `json:"failures_by_class"`
	}
	p.adminJSON("GET", "/peers/a", "", &st)
	if st.FailuresByClass["refused"] < 1 {
		t.Fatalf("failures_by_class %v; want the refusals counted", st.FailuresByClass)
	}
	// DIRECT.
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	d := startPeerd(t, directConfig)
	resp, err = d.client().Get("http://" + origin + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ps := resp.Header.Get("Proxy-Status"); !strings.Contains(ps, "next-hop=DIRECT; fwd-status=200") {
		t.Fatalf("DIRECT Proxy-Status %q", ps)
	}
}

// TestUpstreamBlame: a parent's 5xx whose Proxy-Status blames the
// parent's own next hop counts as the parent's upstream error, never
// against it; one that says the request never reached the origin
// (destination_not_found, connection_refused) goes on to another parent,
// and that parent is passed by for that destination; a refusal
// (http_request_denied) would be the same everywhere and is relayed.
func TestUpstreamBlame(t *testing.T) {
	t.Parallel()
	a, b := newFakeParent(t, "a"), newFakeParent(t, "b")
	p := startPeerd(t, baseConfig+health(1, "1h", "1h")+peerBlock("", a, b))
	c := p.client()
	a.setStatus(502)
	a.SetHeader("Proxy-Status", "squid; error=http_request_denied")
	resp, err := c.Get("http://denying.test/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 502 || b.requests("GET") != 0 {
		t.Fatalf("http_request_denied from a: %d, b asked %d times; want a's 502 and no retry", resp.StatusCode, b.requests("GET"))
	}
	a.SetHeader("Proxy-Status", "squid; error=destination_not_found")
	resp, err = c.Get("http://nowhere.test/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || b.requests("GET") != 1 {
		t.Fatalf("destination_not_found from a: %d, b asked %d times; want b's 200", resp.StatusCode, b.requests("GET"))
	}
	a.setStatus(503)
	a.SetHeader("Proxy-Status", "squid; error=connection_refused")
	resp, err = c.Get("http://refusing.test/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || b.requests("GET") != 2 {
		t.Fatalf("connection_refused from a: %d, b asked %d times; want b's 200", resp.StatusCode, b.requests("GET"))
	}
	var st struct {
		State          string           `json:"state"`
		Suspect        bool             `json:"suspect"`
		UpstreamErrors map[string]int64 `json:"upstream_errors"`
	}
	p.adminJSON("GET", "/peers/a", "", &st)
	if st.State != "alive" || st.Suspect || st.UpstreamErrors["destination_not_found"] != 1 || st.UpstreamErrors["connection_refused"] != 1 {
		t.Fatalf("a = %+v; want alive, not suspect, both upstream errors counted", st)
	}
}

func TestIncidentAdmin(t *testing.T) {
	t.Parallel()
	a, b := newFakeParent(t, "a"), newFakeParent(t, "b")
	cfg := baseConfig + health(1, "1h", "1h") + policy("round-robin") + peerBlock("", a, b)
	p := startPeerd(t, cfg)

	// A drain with a ttl ends by itself.
	code, body := p.adminDo("PUT", "/peers/a/state", "secret", `{"admin_state": "drain", "reason": "kernel upgrade", "ttl": "1s"}`)
	if code != 200 || !strings.Contains(body, `"admin_reason": "kernel upgrade"`) || !strings.Contains(body, `"admin_until"`) {
		t.Fatalf("PUT state: %d %s", code, body)
	}
	code, body = p.adminDo("GET", "/plan?url=http://o.test/x", "", "")
	if code != 200 || !strings.Contains(body, `"peer": "b"`) || !strings.Contains(body, `"why": "drain"`) {
		t.Fatalf("/plan while a drains: %d %s", code, body)
	}
	waitFor(t, "the drain's ttl to end", 5*time.Second, func() bool { return p.peer("a").AdminState == "enabled" })
	waitFor(t, "the end of the ttl logged", 5*time.Second, func() bool { return strings.Contains(p.logs(), "returned to enabled") })
	var hist struct {
		Transitions []struct{ From, To, Cause, Error string } `json:"transitions"`
	}
	p.adminJSON("GET", "/peers/a/history", "", &hist)
	var causes []string
	for _, h := range hist.Transitions {
		causes = append(causes, h.From+">"+h.To+":"+h.Cause)
	}
	if got := strings.Join(causes, " "); !strings.Contains(got, "unknown>alive:probe") || !strings.Contains(got, "enabled>drain:admin") || !strings.Contains(got, "drain>enabled:admin") {
		t.Fatalf("history %s", got)
	}
	// The audit lists the write.
	var audit []map[string]any
	p.adminJSON("GET", "/audit", "", &audit)
	if len(audit) != 1 || audit[0]["peer"] != "a" || audit[0]["to"] != "drain" || audit[0]["reason"] != "kernel upgrade" || audit[0]["remote"] == "" {
		t.Fatalf("/audit = %v", audit)
	}
	// The reload diff.
	reloadConfig(t, p, strings.Replace(cfg, "policy = \"round-robin\"", "policy = \"first-up\"", 1)+"[[peer]]\nname = \"c\"\nhost = \"127.0.0.1\"\nport = 1\n")
	code, body = p.adminDo("POST", "/reload", "secret", "")
	var diff struct {
		Kept, Added, Removed, Settings []string
	}
	json.Unmarshal([]byte(body), &diff)
	if code != 200 || fmt.Sprint(diff.Kept) != "[a b]" || fmt.Sprint(diff.Added) != "[c]" || fmt.Sprint(diff.Settings) != "[selection.policy]" {
		t.Fatalf("POST /reload: %d %s", code, body)
	}
	// peerd's stderr reaches the test through a pipe: wait for the line.
	waitFor(t, "the reload log line saying what changed", 5*time.Second, func() bool { return strings.Contains(p.logs(), `added=c`) })
}
