package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
)

// TestDestinationPolicy: peerd is never a door into the proxy host. With
// the default [access] policy, plain requests and tunnels to its own
// loopback (the admin API among them), by address or by a name that
// resolves there, and to ports outside Squid's Safe_ports/SSL_ports get
// 403 destination-denied naming the rule; nothing is dialled.
func TestDestinationPolicy(t *testing.T) {
	t.Parallel()
	p := startPeerd(t, `
[proxy]
listen = "127.0.0.1:0"
[admin]
listen = "127.0.0.1:0"
`)
	_, adminPort, _ := net.SplitHostPort(p.admin)
	for _, tc := range []struct {
		name, req, rule string
	}{
		{"GET to the admin API", "GET http://127.0.0.1:" + adminPort + "/peers HTTP/1.1\r\nHost: x\r\n\r\n", "deny_to_local: 127.0.0.1 is a loopback address"},
		{"GET to ::1", "GET http://[::1]:" + adminPort + "/metrics HTTP/1.1\r\nHost: x\r\n\r\n", "deny_to_local: ::1 is a loopback address"},
		{"GET to a name for loopback", "GET http://localhost:" + adminPort + "/peers HTTP/1.1\r\nHost: x\r\n\r\n", "deny_to_local"},
		{"GET to port 25", "GET http://mail.example:25/ HTTP/1.1\r\nHost: x\r\n\r\n", "safe_ports: port 25"},
		{"CONNECT to the admin API", "CONNECT 127.0.0.1:" + adminPort + " HTTP/1.1\r\nHost: x\r\n\r\n", "connect_ports"},
		{"CONNECT to port 25", "CONNECT mail.example:25 HTTP/1.1\r\nHost: x\r\n\r\n", "connect_ports"},
		{"upgrade to the admin API", "GET http://127.0.0.1:" + adminPort + "/ HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n", "deny_to_local"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := rawBody(t, p, tc.req)
			if resp.status != 403 || resp.code != "destination-denied" || !strings.Contains(resp.body, tc.rule) {
				t.Fatalf("%d %q %q; want 403 destination-denied naming %q", resp.status, resp.code, resp.body, tc.rule)
			}
		})
	}
	// With CONNECT allowed to every port, the loopback rule still holds
	// for tunnels, by address and by name.
	p2 := startPeerd(t, "[proxy]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n[access]\nconnect_ports = [\"1-65535\"]\n")
	_, admin2, _ := net.SplitHostPort(p2.admin)
	for _, host := range []string{"127.0.0.1", "localhost", "[::1]"} {
		resp := rawBody(t, p2, "CONNECT "+host+":"+admin2+" HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.status != 403 || !strings.Contains(resp.body, "deny_to_local") {
			t.Fatalf("CONNECT %s: %d %q; want 403 deny_to_local", host, resp.status, resp.body)
		}
	}
}

// TestDenyToLocalOff: with deny_to_local = false the same loopback GET is
// forwarded; an Upgrade that is not allowed is dropped, not tunnelled.
func TestDenyToLocalOff(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "origin %s upgrade=%q", r.URL.Path, r.Header.Get("Upgrade"))
	})
	p := startPeerd(t, directConfig)
	resp := rawBody(t, p, "GET http://"+origin+"/x HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
	if resp.status != 200 || resp.body != `origin /x upgrade=""` {
		t.Fatalf("%d %q; want the origin's answer, without the upgrade", resp.status, resp.body)
	}
}

// TestDenyTo: operator-denied destinations, by name and CIDR, refused via
// parents as well as DIRECT.
func TestDenyTo(t *testing.T) {
	t.Parallel()
	a := newFakeParent(t, "a")
	p := startPeerd(t, baseConfig+"deny_to = [\".blocked.example\", \"192.0.2.0/24\"]\n"+peerBlock("", a))
	for _, u := range []string{"http://www.blocked.example/", "http://192.0.2.7/"} {
		resp := rawBody(t, p, "GET "+u+" HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.status != 403 || !strings.Contains(resp.body, "deny_to") {
			t.Fatalf("%s: %d %q; want 403 deny_to", u, resp.status, resp.body)
		}
	}
	if n := a.requests(""); n != 0 {
		t.Fatalf("%d denied requests reached the parent", n)
	}
	if r := do(p.client(), "GET", "http://allowed.example/", ""); r.String() != "200 from a" {
		t.Fatalf("allowed destination: %s", r)
	}
}

type rawResult struct {
	status     int
	code, body string
}

// rawBody sends bytes and returns the first answer with its body.
func rawBody(t *testing.T, p *peerd, req string) rawResult {
	t.Helper()
	c, br := dialProxy(t, p)
	io.WriteString(c, req)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", req, err)
	}
	b, _ := io.ReadAll(resp.Body)
	return rawResult{resp.StatusCode, resp.Header.Get("X-Peerd-Error"), string(b)}
}

// TestChainedDefaultPeerds: two peerds with default names (the host name)
// chained on one host serve each other's requests instead of answering
// 508; a request that really comes back to a peerd is still a loop.
func TestChainedDefaultPeerds(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "via=%s", r.Header.Get("Via"))
	})
	parent := startPeerd(t, directConfig)
	_, pport, _ := net.SplitHostPort(parent.proxy)
	child := startPeerd(t, "[proxy]\nlisten = \"127.0.0.1:0\"\ndirect = \"never\"\n[admin]\nlisten = \"127.0.0.1:0\"\n"+
		"[[peer]]\nname = \"parent\"\nhost = \"127.0.0.1\"\nport = "+pport+"\n")
	resp, err := child.client().Get("http://" + origin + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	via := strings.TrimPrefix(string(b), "via=")
	if resp.StatusCode != 200 || strings.Count(via, "(peerd/") != 2 {
		t.Fatalf("through two default peerds: %d %q; want 200 with both Via entries", resp.StatusCode, via)
	}
	// The Via the origin saw names both; sent back to either, it is a loop.
	host, _ := os.Hostname()
	for _, tc := range []struct {
		to  *peerd
		via string
	}{{parent, via}, {child, via}, {parent, "1.1 " + host}} {
		r := rawBody(t, tc.to, "GET http://"+origin+"/again HTTP/1.1\r\nHost: x\r\nVia: "+tc.via+"\r\n\r\n")
		if r.status != 508 || r.code != "loop-detected" {
			t.Fatalf("Via %q: %d %q; want 508 loop-detected", tc.via, r.status, r.code)
		}
	}
}

// TestUnspecifiedAddressRefusedEverywhere: a request for the unspecified
// address, however spelled, is refused even when it would go to a parent
// (whose kernel would take 0.0.0.0 for its own loopback), and with
// deny_to_local off.
func TestUnspecifiedAddressRefusedEverywhere(t *testing.T) {
	t.Parallel()
	a := newFakeParent(t, "a")
	p := startPeerd(t, baseConfig+"deny_to_local = false\n"+peerBlock("", a))
	for _, u := range []string{"http://0/", "http://0x/", "http://0.0.0.0/", "http://0.0/x", "http://[::ffff:0.0.0.0]/", "http://[::]:8080/"} {
		resp := rawBody(t, p, "GET "+u+" HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.status != 403 || resp.code != "destination-denied" || !strings.Contains(resp.body, "unspecified") {
			t.Fatalf("%s: %d %s %q; want 403 destination-denied", u, resp.status, resp.code, resp.body)
		}
	}
	if resp := rawBody(t, p, "CONNECT 0:443 HTTP/1.1\r\nHost: 0:443\r\n\r\n"); resp.status != 403 {
		t.Fatalf("CONNECT 0:443: %d; want 403", resp.status)
	}
	if n := a.requests(""); n != 0 {
		t.Fatalf("%d requests for the unspecified address reached the parent", n)
	}
}
