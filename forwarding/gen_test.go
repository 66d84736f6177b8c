package forwarding

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sirupsen/logrus/hooks/test"

	"github.com/peerd/peerd/access"
	"github.com/peerd/peerd/cache"
	"github.com/peerd/peerd/dialer"
	"github.com/peerd/peerd/internal/match"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
)

// TestReloadMidRequestKeepsItsGeneration: every part of the config
// changes while a request is in flight (its head read, its body not yet
// sent): the [proxy] section, the routes, the rules, the destination
// policy, the access log. The request is served under the config it began
// with throughout: planned with the old routes (the first parent, not the
// one the new route names), named with the old name, logged to the old
// log. The next request gets the new config.
func TestReloadMidRequestKeepsItsGeneration(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		reg, pn, oldLog := reloadFixture(t, filepath.Join(dir, "old.log"))
		cfg := DefaultConfig()
		cfg.Name = "old-gen"
		px, planner, client := waitingForBody(t, cfg, reg, pn, oldLog, "POST http://origin.test/x HTTP/1.1\r\nHost: origin.test\r\nContent-Length: 7\r\n\r\n")

		// Every part of the config changes.
		next := cfg
		next.Name = "new-gen"
		next.RetryOnStatus = []int{500}
		px.Apply(next)
		routes, err := selection.CompileRoutes([]selection.RouteSpec{{Peers: []string{"b"}}}, map[string]bool{"a": true, "b": true})
		if err != nil {
			t.Fatal(err)
		}
		planner.SetOptions(selection.Options{Policy: selection.FirstUp, Direct: selection.DirectNever, Routes: routes})
		rules, err := CompileRules([]RuleSpec{{Action: "deny", Spec: match.Spec{Domains: []string{"origin.test"}}}})
		if err != nil {
			t.Fatal(err)
		}
		px.SetRules(rules)
		acfg := access.DefaultConfig()
		acfg.DenyTo = []access.Destination{{Name: "origin.test"}}
		pol, err := access.Compile(acfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		px.SetPolicy(pol)
		newLog, err := OpenAccessLog(filepath.Join(dir, "new.log"))
		if err != nil {
			t.Fatal(err)
		}
		defer newLog.Close()
		px.SetAccessLog(newLog, nil, true)

		io.WriteString(client, "payload")
		br := bufio.NewReader(client)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(body) != "from "+addrA {
			t.Fatalf("in flight across the reload: %d %q; want a's answer (the old routes: first-up, a first)", resp.StatusCode, body)
		}
		if via := resp.Header.Get("Via"); !strings.Contains(via, "old-gen") {
			t.Errorf("Via %q; want the old name", via)
		}
		if xc := resp.Header.Get("X-Cache"); !strings.Contains(xc, "old-gen") {
			t.Errorf("X-Cache %q; want the old name", xc)
		}

		// The next request on the connection is served under the new
		// config: the new rule refuses it.
		io.WriteString(client, "GET http://origin.test/y HTTP/1.1\r\nHost: origin.test\r\n\r\n")
		resp, err = http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		if resp.StatusCode != 403 || !strings.Contains(resp.Header.Get("Via"), "new-gen") {
			t.Fatalf("after the reload: %d, Via %q; want 403 from the new rule, named new-gen", resp.StatusCode, resp.Header.Get("Via"))
		}
		client.Close()
		synctest.Wait()
		oldLog.Flush()
		newLog.Flush()
		oldLines, newLines := logLines(t, oldLog.Path()), logLines(t, newLog.Path())
		if len(oldLines) != 1 || !strings.Contains(oldLines[0], "POST http://origin.test/x") {
			t.Errorf("old log: %q; want the request that began under it", oldLines)
		}
		if len(newLines) != 1 || !strings.Contains(newLines[0], "GET http://origin.test/y") {
			t.Errorf("new log: %q; want only the request after the reload", newLines)
		}
	})
}

func logLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// TestReloadMidRequestKeepsItsHealthSettings: [health] and a peer's
// connect_timeout are read from the request's generation too. A GET with
// a body has its generation once its head is read; while it waits for
// the body, a reload shortens a's connect_timeout below a's connect time,
// and first_byte_timeout below a's head time with hedge_budget at 100 %.
// Under the old settings the request goes to a and waits for its answer;
// read live, a's connect would time out, or the late head be hedged to b.
func TestReloadMidRequestKeepsItsHealthSettings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log, _ := test.NewNullLogger()
		h := peers.DefaultConfig()
		h.ProbeInterval, h.ProbeMaxInterval = time.Hour, time.Hour
		h.FirstByteTimeout = peers.FirstByteTimeout{D: 10 * time.Second}
		h.HedgeBudget = 0
		reg := twoAliveParents(t, h, log)
		pn := newPipeNet()
		defer pn.closeAll()
		pn.delay[addrA] = 500 * time.Millisecond // a's connect
		pn.answerDelay[addrA] = 3 * time.Second  // a's head
		cfg := DefaultConfig()
		px, _, client := waitingForBody(t, cfg, reg, pn, nil, "GET http://origin.test/x HTTP/1.1\r\nHost: origin.test\r\nContent-Length: 4\r\n\r\n")

		next := h
		next.FirstByteTimeout = peers.FirstByteTimeout{D: time.Second}
		next.HedgeBudget = 1
		specs := []peers.Spec{{Name: "a", Host: "127.0.0.1", Port: 1, ConnectTimeout: 100 * time.Millisecond}, {Name: "b", Host: "127.0.0.1", Port: 2}}
		if err := reg.Reconcile(peers.Options{Health: next, ConnectTimeout: time.Second, Log: log}, specs); err != nil {
			t.Fatal(err)
		}
		px.Apply(cfg) // the reload's new generation
		if a := reg.Get("a"); a.ConnectTimeout() != 100*time.Millisecond {
			t.Fatalf("a's connect timeout after the reload: %v", a.ConnectTimeout())
		}

		start := time.Now()
		io.WriteString(client, "body")
		resp, err := http.ReadResponse(bufio.NewReader(client), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(body) != "from "+addrA || time.Since(start) < 3*time.Second {
			t.Fatalf("in flight across the reload: %d %q after %v; want a's answer after its 3.5 s (the old settings)",
				resp.StatusCode, body, time.Since(start))
		}
		if n := pn.get(pn.requests, addrB); n != 0 {
			t.Fatalf("b was asked %d times; the old settings never hedge", n)
		}
	})
}

// waitingForBody starts a proxy with cfg (first-up over reg's parents,
// never direct, no connect hedging) on pn, and sends it head on a client
// connection: when it returns, the proxy has read the head and waits for
// the body. The proxy and the connection end with the test.
func waitingForBody(t *testing.T, cfg Config, reg *peers.Registry, pn *pipeNet, al *AccessLog, head string) (*Proxy, *selection.Planner, net.Conn) {
	t.Helper()
	log, _ := test.NewNullLogger()
	cfg.Direct = selection.DirectNever
	cfg.ConnectHedgeDelay = HedgeDelay{}
	planner := selection.New(reg, selection.Options{Policy: selection.FirstUp, Direct: selection.DirectNever})
	px, err := New(Options{Config: cfg, Planner: planner, Accounting: reg, AccessLog: al,
		Dialer: &dialer.Dialer{Reporter: reg, Dial: pn.Dial, Log: log}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.CloseIdle)
	client, server := net.Pipe()
	t.Cleanup(func() { client.Close() })
	px.conns.admit(1 << 20)
	go newClientConn(px, fromLoopback{server}).serve()
	io.WriteString(client, head)
	synctest.Wait() // the proxy has the head, and waits for the body
	return px, planner, client
}

// TestReloadEndsTheOldGenerationWithItsLastRequest: a reload while a
// request is in flight does not end the generation it replaced: what only
// that one used (its cache, its access log file) may not be closed yet
// (the channel Reconfigure returns stays open) and the request is logged
// in its own generation's format; once the request is done, the old
// generation has ended. A generation with no request ends at once.
func TestReloadEndsTheOldGenerationWithItsLastRequest(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		reg, pn, al := reloadFixture(t, filepath.Join(dir, "access.log"))
		cfg := DefaultConfig()
		px, _, client := waitingForBody(t, cfg, reg, pn, al, "POST http://origin.test/x?q HTTP/1.1\r\nHost: origin.test\r\nContent-Length: 4\r\n\r\n")
		old := newCache(t, 0)
		// (the request in flight holds the generation before this one:
		// waitingForBody's, without a cache)
		firstEnded := px.Reconfigure(Generation{Config: cfg, Policy: px.current().policy, AccessLog: al, StripQueryTerms: true})
		format, err := CompileLogFormat(`new-format %rm %ru`)
		if err != nil {
			t.Fatal(err)
		}
		ended := px.Reconfigure(Generation{Config: cfg, Policy: px.current().policy, Cache: old.Reconfigured(cache.DefaultConfig()),
			AccessLog: al, LogFormat: format, StripQueryTerms: true})
		synctest.Wait()
		select {
		case <-firstEnded:
			t.Fatal("the generation of a request in flight ended at a reload")
		case <-ended:
			t.Fatal("a generation ended before the older one of a request in flight")
		default:
		}

		io.WriteString(client, "body")
		br := bufio.NewReader(client)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		io.WriteString(client, "GET http://origin.test/y?q HTTP/1.1\r\nHost: origin.test\r\n\r\n")
		resp, err = http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		synctest.Wait()
		select {
		case <-ended:
		default:
			t.Fatal("the old generations did not end once their last request was done")
		}
		al.Flush()
		lines := logLines(t, al.Path())
		if len(lines) != 2 || strings.HasPrefix(lines[0], "new-format") || !strings.Contains(lines[0], "POST http://origin.test/x? ") ||
			lines[1] != "new-format GET http://origin.test/y?" {
			t.Fatalf("access log:\n%s\nwant the request in flight in the old format, the next in the new", strings.Join(lines, "\n"))
		}
	})
}

// reloadFixture is what the reload tests start from: two alive parents
// probed never, an injected network and an access log at path, each
// closed when the test ends.
func reloadFixture(t *testing.T, path string) (*peers.Registry, *pipeNet, *AccessLog) {
	t.Helper()
	log, _ := test.NewNullLogger()
	h := peers.DefaultConfig()
	h.ProbeInterval, h.ProbeMaxInterval = time.Hour, time.Hour
	reg := twoAliveParents(t, h, log)
	pn := newPipeNet()
	t.Cleanup(pn.closeAll)
	al, err := OpenAccessLog(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	return reg, pn, al
}
