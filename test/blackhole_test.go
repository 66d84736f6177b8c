package e2e

// A parent whose SYNs are dropped is a connect timeout everywhere an
// operator looks (issue 21): failures_by_class, Proxy-Status, the access
// log; black-holed from start-up (probes) and dying under traffic
// (requests).

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

type byClass struct {
	FailuresByClass map[string]int `json:"failures_by_class"`
	State           string         `json:"state"`
}

func (p *peerd) failureClasses(name string) byClass {
	p.t.Helper()
	var st byClass
	p.adminJSON("GET", "/peers/"+name, "", &st)
	return st
}

// blackholePeer is a peer at a black-holed loopback address.
type blackholePeer struct{ name, p string }

func (b blackholePeer) peerName() string { return b.name }
func (b blackholePeer) port() string     { return b.p }

func TestBlackholedIsTimeoutFromStartUp(t *testing.T) {
	port := freePort(t)
	blackholeAt(t, net.JoinHostPort("127.0.0.1", port))
	cfg := baseConfig + `
[health]
connect_fail_limit = 3
probe_interval = "100ms"
probe_max_interval = "200ms"
probe_timeout = "300ms"
` + peerBlock(`connect_timeout = "300ms"`, blackholePeer{"bh", port})
	p := startPeerd(t, cfg)
	// Dead at its first probe; the probes of a dead peer go on failing.
	waitFor(t, "three failed probes of bh", 10*time.Second, func() bool {
		st := p.failureClasses("bh")
		n := 0
		for _, v := range st.FailuresByClass {
			n += v
		}
		return st.State == "dead" && n >= 3
	})
	st := p.failureClasses("bh")
	if st.FailuresByClass["timeout"] < 3 || st.FailuresByClass["reset"] != 0 {
		t.Fatalf("failures_by_class %v; want timeouts only", st.FailuresByClass)
	}
}

func TestBlackholedUnderTrafficIsTimeout(t *testing.T) {
	a := newFakeParent(t, "a")
	cfg := withProxy(strings.Replace(baseConfig, `connect_timeout = "2s"`, `connect_timeout = "300ms"`, 1), `connect_hedge_delay = "0s"`) + `
[health]
connect_fail_limit = 3
probe_interval = "10s"
probe_max_interval = "10s"
` + peerBlock("", a)
	p := startPeerd(t, cfg)
	if r := do(p.client(), "GET", "http://o.test/warm", ""); r.status != 200 {
		t.Fatalf("warm: %s", r)
	}
	a.stop()
	blackholeAt(t, a.addr)
	p.client().Transport.(*recordingTransport).base.(interface{ CloseIdleConnections() }).CloseIdleConnections()
	var proxyStatus []string
	for i := 0; i < 3 && p.failureClasses("a").State != "dead"; i++ {
		c, br := dialProxy(t, p)
		fmt.Fprintf(c, "GET http://o.test/bh%d HTTP/1.1\r\nHost: o.test\r\n\r\n", i)
		resp := mustRead(t, br)
		proxyStatus = append(proxyStatus, resp.Header.Get("Proxy-Status"))
		if resp.StatusCode < 500 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	waitFor(t, "a dead", 10*time.Second, func() bool { return p.failureClasses("a").State == "dead" })
	st := p.failureClasses("a")
	if st.FailuresByClass["timeout"] < 1 || st.FailuresByClass["reset"] != 0 {
		t.Fatalf("failures_by_class %v; want timeouts only", st.FailuresByClass)
	}
	if len(proxyStatus) == 0 || !strings.Contains(proxyStatus[0], "error=connection_timeout") {
		t.Fatalf("Proxy-Status %q; want connection_timeout", proxyStatus)
	}
	waitFor(t, "the access log line", 5*time.Second, func() bool {
		b, _ := os.ReadFile(p.accessLog)
		return strings.Contains(string(b), "/bh0") && strings.Contains(string(b), "connection_timeout")
	})
}

func mustRead(t *testing.T, br *bufio.Reader) *http.Response {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}
