package forwarding

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sirupsen/logrus/hooks/test"

	"github.com/peerd/peerd/access"
	"github.com/peerd/peerd/auth"
	"github.com/peerd/peerd/cache"
	"github.com/peerd/peerd/dialer"
	"github.com/peerd/peerd/internal/match"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
)

// engine is a proxy over an injected network: parents a and b, and
// origins reached DIRECT at 192.0.2.10 (origin.test resolves there).
type engine struct {
	reg     *peers.Registry
	net     *pipeNet
	proxy   *Proxy
	planner *selection.Planner
	log     *AccessLog
	clients []net.Conn
}

const addrOrigin = "192.0.2.10"

type fixedResolver struct{}

func (fixedResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if host == "origin.test" {
		return []netip.Addr{netip.MustParseAddr(addrOrigin)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// newEngine builds the proxy; set changes its [proxy] config and direct
// the planner's direct mode.
func newEngine(t *testing.T, direct selection.Direct, set func(*Config)) *engine {
	t.Helper()
	log, _ := test.NewNullLogger()
	h := peers.DefaultConfig()
	h.ConnectFailLimit = 3
	h.ProbeInterval, h.ProbeMaxInterval = time.Hour, time.Hour
	reg := twoAliveParents(t, h, log)
	pn := newPipeNet()
	al, err := OpenAccessLog(filepath.Join(t.TempDir(), "access.log"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Name = "px"
	cfg.ConnectTimeout = time.Second
	cfg.ReadTimeout = 30 * time.Second
	cfg.Direct = direct
	cfg.ConnectHedgeDelay = HedgeDelay{}
	if set != nil {
		set(&cfg)
	}
	planner := selection.New(reg, selection.Options{Policy: selection.FirstUp, Direct: direct})
	px, err := New(Options{Config: cfg, Planner: planner, Accounting: reg, AccessLog: al, Resolver: fixedResolver{},
		Dialer: &dialer.Dialer{Reporter: reg, Dial: pn.Dial, Log: log}, DirectDial: pn.Dial, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	e := &engine{reg: reg, net: pn, proxy: px, planner: planner, log: al}
	t.Cleanup(func() {
		for _, c := range e.clients {
			c.Close()
		}
		px.CloseIdle()
		pn.closeAll()
		al.Close()
	})
	return e
}

// kill marks a peer dead (its connect_fail_limit of failures).
func (e *engine) kill(name string) {
	p := e.reg.Get(name)
	for i := 0; i < 3; i++ {
		e.reg.Observe(p, peers.Outcome{At: time.Now(), Err: fmt.Errorf("refused")})
	}
}

// logLines is what the access log holds now.
func (e *engine) logLines(t *testing.T) []string {
	t.Helper()
	synctest.Wait() // the requests answered have finished
	e.log.Flush()
	return logLines(t, e.log.Path())
}

// testClient is one client connection to the engine.
type testClient struct {
	nc net.Conn
	br *bufio.Reader
}

func (e *engine) dial() *testClient {
	c, s := net.Pipe()
	e.clients = append(e.clients, c)
	e.proxy.conns.admit(1 << 20)
	cc := newClientConn(e.proxy, fromLoopback{s})
	cc.counted = true
	go cc.serve()
	return &testClient{nc: c, br: bufio.NewReader(c)}
}

// do sends raw and reads one answer (for HEAD without a body, for
// CONNECT without one when it opened a tunnel).
func (c *testClient) do(t *testing.T, raw string) (*http.Response, string) {
	t.Helper()
	go io.WriteString(c.nc, raw)
	return c.read(t, raw[:strings.IndexByte(raw, ' ')])
}

func (c *testClient) read(t *testing.T, method string) (*http.Response, string) {
	t.Helper()
	req := &http.Request{Method: method}
	resp, err := http.ReadResponse(c.br, req)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	if method == http.MethodConnect && resp.StatusCode/100 == 2 {
		return resp, "" // the tunnel follows
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// echoTunnel answers CONNECT with 200 and echoes what comes through.
func echoTunnel(req *http.Request, br *bufio.Reader, s net.Conn) bool {
	if req.Method != http.MethodConnect {
		return false
	}
	io.WriteString(s, "HTTP/1.1 200 Connection established\r\n\r\n")
	io.Copy(s, br)
	return false
}

func TestConnectThroughParent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, selection.DirectNever, nil)
		var got *http.Request
		e.net.handle[addrA] = func(req *http.Request, br *bufio.Reader, s net.Conn) bool {
			got = req
			return echoTunnel(req, br, s)
		}
		c := e.dial()
		resp, _ := c.do(t, "CONNECT origin.test:443 HTTP/1.1\r\nHost: origin.test:443\r\nUser-Agent: ua/1\r\n\r\n")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %d", resp.StatusCode)
		}
		io.WriteString(c.nc, "ping")
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c.br, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("through the tunnel: %q %v", buf, err)
		}
		if n := e.proxy.Tunnels(); n != 1 {
			t.Fatalf("%d tunnels open; want 1", n)
		}
		if got.Host != "origin.test:443" || got.Header.Get("User-Agent") != "ua/1" || !strings.Contains(got.Header.Get("Via"), "px") {
			t.Fatalf("the parent was asked %+v", got)
		}
		c.nc.Close()
		synctest.Wait()
		if err := e.proxy.WaitTunnels(context.Background()); err != nil || e.proxy.Tunnels() != 0 {
			t.Fatalf("tunnels after the client left: %d %v", e.proxy.Tunnels(), err)
		}
		lines := e.logLines(t)
		if len(lines) != 1 || !strings.Contains(lines[0], "TCP_TUNNEL/200") || !strings.Contains(lines[0], "FIRSTUP_PARENT/127.0.0.1") {
			t.Fatalf("access log %q", lines)
		}
	})
}

func TestConnectRefusedByParentIsPassedOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, selection.DirectNever, nil)
		e.net.handle[addrA] = func(req *http.Request, br *bufio.Reader, s net.Conn) bool {
			io.WriteString(s, "HTTP/1.1 403 Forbidden\r\nContent-Length: 2\r\n\r\nno")
			return false
		}
		resp, body := e.dial().do(t, "CONNECT origin.test:443 HTTP/1.1\r\nHost: origin.test:443\r\n\r\n")
		if resp.StatusCode != 403 || body != "no" || resp.Header.Get("X-Peerd-Peer") != "a" || !resp.Close {
			t.Fatalf("%d %q peer %q close %v; want the parent's 403 as is, and the end", resp.StatusCode, body, resp.Header.Get("X-Peerd-Peer"), resp.Close)
		}
		if st := e.reg.Get("a").Health().Snapshot(); st.State != peers.Alive || st.ConsecutiveFailures != 0 {
			t.Fatalf("a refusal is no peer failure: %+v", st)
		}
	})
}

func TestConnectWithoutReplyGoesToNextParent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, selection.DirectNever, nil)
		e.net.handle[addrA] = func(*http.Request, *bufio.Reader, net.Conn) bool { return false } // closes unanswered
		e.net.handle[addrB] = echoTunnel
		c := e.dial()
		resp, _ := c.do(t, "CONNECT origin.test:443 HTTP/1.1\r\nHost: origin.test:443\r\n\r\n")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %d", resp.StatusCode)
		}
		io.WriteString(c.nc, "x")
		if b, _ := c.br.ReadByte(); b != 'x' {
			t.Fatal("no tunnel through b")
		}
		c.nc.Close()
	})
}

func TestConnectDirectAndNoHop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, selection.DirectAlways, nil)
		e.net.handle[addrOrigin+":443"] = func(req *http.Request, br *bufio.Reader, s net.Conn) bool {
			t.Errorf("DIRECT got an HTTP request: %v", req.Method)
			return false
		}
		c := e.dial()
		resp, _ := c.do(t, "CONNECT origin.test:443 HTTP/1.1\r\nHost: origin.test:443\r\n\r\n")
		if resp.StatusCode != 200 {
			t.Fatalf("DIRECT CONNECT: %d", resp.StatusCode)
		}
		c.nc.Close()
		synctest.Wait()
		if n := e.net.get(e.net.dials, addrOrigin+":443"); n != 1 {
			t.Fatalf("the origin was dialled %d times", n)
		}

		// Every parent dead and direct never: 503 at once, and the end.
		e2 := newEngine(t, selection.DirectNever, nil)
		e2.kill("a")
		e2.kill("b")
		resp, _ = e2.dial().do(t, "CONNECT origin.test:443 HTTP/1.1\r\nHost: origin.test:443\r\n\r\n")
		if resp.StatusCode != 503 || resp.Header.Get("X-Peerd-Error") != CodeNoPeers || !resp.Close {
			t.Fatalf("no live parent: %d %q", resp.StatusCode, resp.Header.Get("X-Peerd-Error"))
		}
	})
}

// cacheable answers GETs with a stored-for-a-second response with an
// ETag, and 304 to a matching If-None-Match.
func cacheable(body string) func(*http.Request, *bufio.Reader, net.Conn) bool {
	return func(req *http.Request, br *bufio.Reader, s net.Conn) bool {
		io.Copy(io.Discard, req.Body)
		if req.Header.Get("If-None-Match") == `"v1"` {
			io.WriteString(s, "HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nCache-Control: max-age=1\r\n\r\n")
			return true
		}
		fmt.Fprintf(s, "HTTP/1.1 200 OK\r\nETag: \"v1\"\r\nCache-Control: max-age=1\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		return true
	}
}

func newCache(t *testing.T, staleIfDead time.Duration) *cache.Cache {
	t.Helper()
	cfg := cache.DefaultConfig()
	cfg.Memory = 64 << 20
	cfg.StaleIfDead = staleIfDead
	cfg.QuickAbortMin = -1 // a download being stored always goes on
	ch, err := cache.Open(cfg, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ch.Close)
	return ch
}

func TestCacheHitRevalidationAndInvalidation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, selection.DirectNever, nil)
		e.proxy.SetCache(newCache(t, time.Hour))
		e.net.handle[addrA] = cacheable("stored")
		c := e.dial()
		get := "GET http://origin.test/doc HTTP/1.1\r\nHost: origin.test\r\n\r\n"
		resp, body := c.do(t, get)
		if resp.StatusCode != 200 || body != "stored" || !strings.Contains(resp.Header.Get("Cache-Status"), "fwd=uri-miss; stored") {
			t.Fatalf("miss: %d %q %q", resp.StatusCode, body, resp.Header.Get("Cache-Status"))
		}
		resp, body = c.do(t, get)
		if body != "stored" || !strings.HasPrefix(resp.Header.Get("X-Cache"), "HIT") || e.net.get(e.net.requests, addrA) != 1 {
			t.Fatalf("hit: %q %q, parent asked %d times", body, resp.Header.Get("X-Cache"), e.net.get(e.net.requests, addrA))
		}
		// A conditional hit: 304 from the cache.
		resp, _ = c.do(t, "GET http://origin.test/doc HTTP/1.1\r\nHost: origin.test\r\nIf-None-Match: \"v1\"\r\n\r\n")
		if resp.StatusCode != 304 {
			t.Fatalf("a conditional hit: %d", resp.StatusCode)
		}
		// A range of it.
		resp, body = c.do(t, "GET http://origin.test/doc HTTP/1.1\r\nHost: origin.test\r\nRange: bytes=1-3\r\n\r\n")
		if resp.StatusCode != 206 || body != "tor" {
			t.Fatalf("a range: %d %q", resp.StatusCode, body)
		}
		time.Sleep(2 * time.Second) // stale now: revalidated, 304
		resp, body = c.do(t, get)
		if body != "stored" || !strings.Contains(resp.Header.Get("Cache-Status"), "fwd=stale; fwd-status=304") ||
			!strings.Contains(resp.Header.Get("Proxy-Status"), "next-hop=a") || e.net.get(e.net.requests, addrA) != 2 {
			t.Fatalf("revalidated: %q %q %q", body, resp.Header.Get("Cache-Status"), resp.Header.Get("Proxy-Status"))
		}
		// An unsafe request that succeeds drops it.
		resp, _ = c.do(t, "POST http://origin.test/doc HTTP/1.1\r\nHost: origin.test\r\nContent-Length: 1\r\n\r\nx")
		if resp.StatusCode != 200 {
			t.Fatalf("POST: %d", resp.StatusCode)
		}
		resp, _ = c.do(t, get)
		if !strings.HasPrefix(resp.Header.Get("X-Cache"), "MISS") || e.net.get(e.net.requests, addrA) != 4 {
			t.Fatalf("after the POST: %q, parent asked %d times; want a miss", resp.Header.Get("X-Cache"), e.net.get(e.net.requests, addrA))
		}
		// only-if-cached for what is not stored: 504 at once.
		resp, _ = c.do(t, "GET http://origin.test/none HTTP/1.1\r\nHost: origin.test\r\nCache-Control: only-if-cached\r\n\r\n")
		if resp.StatusCode != 504 || resp.Header.Get("X-Peerd-Error") != CodeNotCached {
			t.Fatalf("only-if-cached: %d %q", resp.StatusCode, resp.Header.Get("X-Peerd-Error"))
		}
		lines := e.logLines(t)
		if len(lines) != 8 || !strings.Contains(lines[1], "TCP_MEM_HIT/200") || !strings.Contains(lines[4], "TCP_REFRESH_UNMODIFIED/200") ||
			!strings.Contains(lines[1], "text/plain") {
			t.Fatalf("access log:\n%s", strings.Join(lines, "\n"))
		}
	})
}

// TestStaleIfDead: with every parent dead, a stale stored response is
// served within stale_if_dead, saying why; past it the client gets the
// error of no next hop.
func TestStaleIfDead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, selection.DirectNever, nil)
		e.proxy.SetCache(newCache(t, time.Minute))
		e.net.handle[addrA] = cacheable("kept")
		c := e.dial()
		get := "GET http://origin.test/doc HTTP/1.1\r\nHost: origin.test\r\n\r\n"
		c.do(t, get)
		time.Sleep(2 * time.Second)
		e.kill("a")
		e.kill("b")
		resp, body := c.do(t, get)
		if resp.StatusCode != 200 || body != "kept" || !strings.Contains(resp.Header.Get("Cache-Status"), "detail=no-next-hop") ||
			!strings.Contains(resp.Header.Get("Proxy-Status"), "destination_unavailable") {
			t.Fatalf("stale if dead: %d %q %q %q", resp.StatusCode, body, resp.Header.Get("Cache-Status"), resp.Header.Get("Proxy-Status"))
		}
		if e.net.get(e.net.dials, addrA)+e.net.get(e.net.dials, addrB) != 1 {
			t.Fatal("a dead parent was dialled")
		}
		time.Sleep(2 * time.Minute) // past stale_if_dead
		resp, _ = c.do(t, get)
		if resp.StatusCode != 503 || resp.Header.Get("X-Peerd-Error") != CodeNoPeers {
			t.Fatalf("past stale_if_dead: %d %q", resp.StatusCode, resp.Header.Get("X-Peerd-Error"))
		}
		lines := e.logLines(t)
		if len(lines) != 3 || !strings.Contains(lines[1], "TCP_REFRESH_FAIL_OLD/200") {
			t.Fatalf("access log:\n%s", strings.Join(lines, "\n"))
		}
	})
}

// bodyLength answers with the length and framing of the body it got.
func bodyLength(req *http.Request, br *bufio.Reader, s net.Conn) bool {
	b, err := io.ReadAll(req.Body)
	answer := fmt.Sprintf("%d %v %v %s", len(b), req.TransferEncoding, err, req.Trailer.Get("X-Sum"))
	fmt.Fprintf(s, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
	return true
}

func TestRequestBodies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, selection.DirectNever, func(c *Config) { c.MaxRetryBody = 16 })
		e.net.handle[addrA] = bodyLength
		c := e.dial()
		big := strings.Repeat("x", 1000)
		_, body := c.do(t, "PUT http://origin.test/u HTTP/1.1\r\nHost: origin.test\r\nContent-Length: 1000\r\n\r\n"+big)
		if body != "1000 [] <nil> " {
			t.Fatalf("a streamed body: %q", body)
		}
		_, body = c.do(t, "POST http://origin.test/u HTTP/1.1\r\nHost: origin.test\r\nTransfer-Encoding: chunked\r\n\r\n3e8\r\n"+big+"\r\n0\r\n\r\n")
		if body != "1000 [chunked] <nil> " {
			t.Fatalf("a streamed chunked body: %q", body)
		}
		_, body = c.do(t, "POST http://origin.test/u HTTP/1.1\r\nHost: origin.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 3\r\n\r\n")
		if body != "3 [chunked] <nil> 3" {
			t.Fatalf("a buffered body with a trailer: %q", body)
		}
		// 100-continue: told to go on, then answered.
		go io.WriteString(c.nc, "POST http://origin.test/u HTTP/1.1\r\nHost: origin.test\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
		if resp, _ := c.read(t, "GET"); resp.StatusCode != 100 {
			t.Fatalf("Expect: 100-continue got %d first", resp.StatusCode)
		}
		go io.WriteString(c.nc, "ok")
		if _, body = c.read(t, "GET"); body != "2 [] <nil> " {
			t.Fatalf("after 100: %q", body)
		}
		// A body cut short: the client is gone; nothing is answered.
		c2 := e.dial()
		io.WriteString(c2.nc, "PUT http://origin.test/u HTTP/1.1\r\nHost: origin.test\r\nContent-Length: 1000\r\n\r\nabc")
		c2.nc.Close()
		synctest.Wait()
	})
}

func TestMaxForwardsAndTrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, selection.DirectNever, nil)
		var got string
		e.net.handle[addrA] = func(req *http.Request, br *bufio.Reader, s net.Conn) bool {
			got = req.Header.Get("Max-Forwards")
			io.WriteString(s, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
			return true
		}
		c := e.dial()
		resp, body := c.do(t, "TRACE http://origin.test/ HTTP/1.1\r\nHost: origin.test\r\nMax-Forwards: 0\r\nCookie: secret\r\nX-Mine: 1\r\n\r\n")
		if resp.StatusCode != 200 || !strings.Contains(body, "X-Mine: 1") || strings.Contains(body, "secret") {
			t.Fatalf("TRACE at 0: %d %q", resp.StatusCode, body)
		}
		resp, _ = c.do(t, "OPTIONS http://origin.test/ HTTP/1.1\r\nHost: origin.test\r\nMax-Forwards: 0\r\n\r\n")
		if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Allow"), "CONNECT") {
			t.Fatalf("OPTIONS at 0: %d", resp.StatusCode)
		}
		c.do(t, "OPTIONS http://origin.test/ HTTP/1.1\r\nHost: origin.test\r\nMax-Forwards: 3\r\n\r\n")
		if got != "2" {
			t.Fatalf("Max-Forwards sent on: %q; want 2", got)
		}
		if resp, _ = c.do(t, "OPTIONS http://origin.test/ HTTP/1.1\r\nHost: origin.test\r\nMax-Forwards: x\r\n\r\n"); resp.StatusCode != 400 {
			t.Fatalf("a bad Max-Forwards: %d", resp.StatusCode)
		}
		if e.net.get(e.net.requests, addrA) != 1 {
			t.Fatal("a request answered at Max-Forwards 0 was forwarded")
		}
	})
}

func TestHeadsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, selection.DirectNever, func(c *Config) { c.MaxHeaderSize = 1 << 10 })
		for raw, want := range map[string]int{
			"GET http://origin.test/ HTTP/1.1\r\nHost: origin.test\r\nBad Field\r\n\r\n":                              400,
			"GET http://origin.test/ HTTP/1.1\r\nX: " + strings.Repeat("y", 2000) + "\r\n\r\n":                        431,
			"GET /relative HTTP/1.1\r\nHost: origin.test\r\n\r\n":                                                     400,
			"GET ftp://origin.test/ HTTP/1.1\r\nHost: origin.test\r\n\r\n":                                            400,
			"GET http://origin.test:25/ HTTP/1.1\r\nHost: origin.test\r\n\r\n":                                        403,
			"GET http://origin.test/ HTTP/1.1\r\nHost: origin.test\r\nVia: 1.1 px (peerd/dev)\r\n\r\n":                508,
			"CONNECT origin.test:25 HTTP/1.1\r\nHost: origin.test:25\r\n\r\n":                                         403,
			"GET http://0.0.0.0/ HTTP/1.1\r\nHost: 0.0.0.0\r\n\r\n":                                                   403,
			"GET http://origin.test/ HTTP/1.1\r\nHost: origin.test\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n": 400,
		} {
			resp, _ := e.dial().do(t, raw)
			if resp.StatusCode != want {
				t.Errorf("%.40q: %d; want %d", raw, resp.StatusCode, want)
			}
		}
		// A head that does not come whole within request_timeout: 408.
		c := e.dial()
		io.WriteString(c.nc, "GET http://origin.test/ HTTP/1.1\r\n")
		if resp, _ := c.read(t, "GET"); resp.StatusCode != 408 {
			t.Fatalf("a slow head: %d", resp.StatusCode)
		}
	})
}

// fakeAuth knows one user, "ann" with "pw".
type fakeAuth struct{}

func (fakeAuth) Check(h []byte, _ string, _ time.Time) (string, auth.Verdict) {
	switch string(h) {
	case "":
		return "", auth.Missing
	case "Basic YW5uOnB3": // ann:pw
		return "ann", auth.Allowed
	case "Basic Ym9iOng=": // bob:x, too often
		return "bob", auth.Slowed
	}
	return "?", auth.Wrong
}

func (fakeAuth) Realm() string { return "peerd" }

func TestAuthAndRules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, selection.DirectNever, nil)
		e.proxy.SetAuth(fakeAuth{})
		c := e.dial()
		resp, _ := c.do(t, "GET http://origin.test/ HTTP/1.1\r\nHost: origin.test\r\n\r\n")
		if resp.StatusCode != 407 || !strings.Contains(resp.Header.Get("Proxy-Authenticate"), `realm="peerd"`) {
			t.Fatalf("no credentials: %d %q", resp.StatusCode, resp.Header.Get("Proxy-Authenticate"))
		}
		resp, _ = c.do(t, "GET http://origin.test/ HTTP/1.1\r\nHost: origin.test\r\nProxy-Authorization: Basic YW5uOnB3\r\n\r\n")
		if resp.StatusCode != 200 {
			t.Fatalf("right credentials: %d", resp.StatusCode)
		}
		resp, _ = c.do(t, "GET http://origin.test/ HTTP/1.1\r\nHost: origin.test\r\nProxy-Authorization: Basic Ym9iOng=\r\n\r\n")
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("too many wrong credentials: %d", resp.StatusCode)
		}
		lines := e.logLines(t)
		if len(lines) != 3 || !strings.Contains(lines[1], " ann ") || !strings.Contains(lines[2], " bob ") || !strings.Contains(lines[0], "TCP_DENIED/407") {
			t.Fatalf("access log:\n%s", strings.Join(lines, "\n"))
		}
		rules, err := CompileRules([]RuleSpec{{Action: "deny", Spec: match.Spec{Domains: []string{"origin.test"}}}})
		if err != nil {
			t.Fatal(err)
		}
		e.proxy.SetAuth(nil)
		e.proxy.SetRules(rules)
		if resp, _ = c.do(t, "GET http://origin.test/ HTTP/1.1\r\nHost: origin.test\r\n\r\n"); resp.StatusCode != 403 || resp.Header.Get("X-Peerd-Error") != CodeAccessDenied {
			t.Fatalf("a deny rule: %d", resp.StatusCode)
		}
		if d, rule := e.proxy.Refusal("GET", "http://origin.test/", "127.0.0.1", ""); rule != 0 || !strings.Contains(d, "refused by [[rule]] #1") {
			t.Fatalf("explained: %q %d", d, rule)
		}
		for _, tc := range []struct{ method, url, client, want string }{
			{"GET", "http://other.test/", "203.0.113.5", CodeAccessDenied},
			{"GET", "http://other.test:25/", "127.0.0.1", CodeDenied},
			{"GET", "nonsense", "127.0.0.1", CodeBadRequest},
			{"CONNECT", "other.test", "127.0.0.1", CodeBadRequest},
			{"CONNECT", "other.test:443", "127.0.0.1", ""},
			{"GET", "https://other.test/", "127.0.0.1", ""},
		} {
			if d, _ := e.proxy.Refusal(tc.method, tc.url, tc.client, ""); !strings.HasPrefix(d, tc.want) || (tc.want == "") != (d == "") {
				t.Errorf("Refusal(%s %s from %s) = %q; want %q", tc.method, tc.url, tc.client, d, tc.want)
			}
		}
	})
}

// TestAccessLogFormats: a logformat of the operator's own, and ICP lines.
func TestAccessLogFormats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, selection.DirectNever, nil)
		f, err := CompileLogFormat(`%>a %rm %ru %>Hs %<st %{User-Agent}>h %Ss %un %>st %rp %rv %mt`)
		if err != nil {
			t.Fatal(err)
		}
		e.proxy.SetAccessLog(e.log, f, true)
		e.dial().do(t, "GET http://origin.test/p?q HTTP/1.1\r\nHost: origin.test\r\nUser-Agent: ua\r\n\r\n")
		synctest.Wait() // its line is written
		e.proxy.LogICP(netip.MustParseAddr("10.1.2.3"), "UDP_MISS", 40, []byte("http://origin.test/x"))
		lines := e.logLines(t)
		// (strip_query_terms: the query is logged as "?")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "127.0.0.1 GET http://origin.test/p? 200 ") || !strings.Contains(lines[0], " ua TCP_MISS - ") ||
			!strings.Contains(lines[1], "10.1.2.3 UDP_MISS/000 40 ICP_QUERY http://origin.test/x") {
			t.Fatalf("access log:\n%s", strings.Join(lines, "\n"))
		}
	})
}

// TestShutdownAnswersIdleWithClose: a keep-alive connection idle when
// the stop begins has its next request (within shutdown_idle_grace)
// answered with Connection: close; a new connection is refused.
func TestShutdownAnswersIdleWithClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, selection.DirectNever, nil)
		c := e.dial()
		get := "GET http://origin.test/ HTTP/1.1\r\nHost: origin.test\r\n\r\n"
		if resp, _ := c.do(t, get); resp.Close {
			t.Fatal("closed before the stop")
		}
		done := make(chan error)
		go func() { done <- e.proxy.Shutdown(context.Background()) }()
		synctest.Wait()
		resp, _ := c.do(t, get)
		if !resp.Close {
			t.Fatal("the answer during the stop did not say Connection: close")
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n := e.proxy.OpenConnections(); n != 0 {
			t.Fatalf("%d connections open after the stop", n)
		}
	})
}

// TestUnsolicitedBytesCloseTheConnection: a parent that sends bytes past
// its answer never has them answer the next request: the connection is
// not reused.
func TestUnsolicitedBytesCloseTheConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, selection.DirectNever, nil)
		n := 0
		e.net.handle[addrA] = func(req *http.Request, br *bufio.Reader, s net.Conn) bool {
			n++
			fmt.Fprintf(s, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n%02dHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil", n)
			return true
		}
		c := e.dial()
		for i := 1; i <= 2; i++ {
			if _, body := c.do(t, "GET http://origin.test/ HTTP/1.1\r\nHost: origin.test\r\n\r\n"); body != fmt.Sprintf("%02d", i) {
				t.Fatalf("answer %d: %q; want the parent's answer to it, never the bytes it sent unasked", i, body)
			}
		}
		if d := e.net.get(e.net.dials, addrA); d != 2 {
			t.Fatalf("a dialled %d times; want a new connection per request", d)
		}
	})
}

// TestUpgradeThroughParent: an allowed Upgrade is offered on, and a 101
// makes the two connections a tunnel.
func TestUpgradeThroughParent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, selection.DirectNever, nil)
		acfg := access.DefaultConfig()
		acfg.Upgrade = []string{"websocket"}
		pol, err := access.Compile(acfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		e.proxy.SetPolicy(pol)
		e.net.handle[addrA] = func(req *http.Request, br *bufio.Reader, s net.Conn) bool {
			if req.Header.Get("Upgrade") != "websocket" {
				io.WriteString(s, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
				return true
			}
			io.WriteString(s, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
			io.Copy(s, br)
			return false
		}
		c := e.dial()
		go io.WriteString(c.nc, "GET http://origin.test/ws HTTP/1.1\r\nHost: origin.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		resp, err := http.ReadResponse(c.br, nil)
		if err != nil || resp.StatusCode != 101 || resp.Header.Get("Upgrade") != "websocket" {
			t.Fatalf("upgrade: %v %v", resp, err)
		}
		io.WriteString(c.nc, "frame")
		buf := make([]byte, 5)
		if _, err := io.ReadFull(c.br, buf); err != nil || string(buf) != "frame" {
			t.Fatalf("through the upgraded connection: %q %v", buf, err)
		}
		c.nc.Close()
	})
}

// TestCollapsedMisses: concurrent misses for one URL make one request to
// the parent; the others are answered with its response.
func TestCollapsedMisses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, selection.DirectNever, nil)
		e.proxy.SetCache(newCache(t, time.Hour))
		e.net.handle[addrA] = func(req *http.Request, br *bufio.Reader, s net.Conn) bool {
			time.Sleep(100 * time.Millisecond) // slow (within the first-byte timeout): the others join meanwhile
			return cacheable("once")(req, br, s)
		}
		type answer struct {
			status int
			body   string
			cs     string
		}
		got := make(chan answer, 3)
		for i := 0; i < 3; i++ {
			c := e.dial()
			go func() {
				resp, body := c.do(t, "GET http://origin.test/c HTTP/1.1\r\nHost: origin.test\r\n\r\n")
				got <- answer{resp.StatusCode, body, resp.Header.Get("Cache-Status")}
			}()
			synctest.Wait()
		}
		collapsed := 0
		for i := 0; i < 3; i++ {
			a := <-got
			if a.status != 200 || a.body != "once" {
				t.Fatalf("%+v", a)
			}
			if strings.Contains(a.cs, "collapsed") {
				collapsed++
			}
		}
		if n := e.net.get(e.net.requests, addrA); n != 1 || collapsed != 2 {
			t.Fatalf("the parent was asked %d times, %d answers collapsed; want 1 and 2", n, collapsed)
		}
	})
}

// TestClientLeavesMidBody: a client that leaves while a body is relayed
// is cut; a body the cache stores is read on to its end when quick_abort
// says so (here: always), so the next client finds it stored.
func TestClientLeavesMidBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, selection.DirectNever, nil)
		e.proxy.SetCache(newCache(t, time.Hour))
		body := strings.Repeat("b", 100<<10)
		e.net.handle[addrA] = func(req *http.Request, br *bufio.Reader, s net.Conn) bool {
			fmt.Fprintf(s, "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: %d\r\n\r\n", len(body))
			io.WriteString(s, body[:50<<10])
			time.Sleep(time.Second)
			io.WriteString(s, body[50<<10:])
			return true
		}
		c := e.dial()
		go io.WriteString(c.nc, "GET http://origin.test/big HTTP/1.1\r\nHost: origin.test\r\n\r\n")
		resp, err := http.ReadResponse(c.br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadFull(resp.Body, make([]byte, 1000))
		c.nc.Close() // gone with most of the body still to come
		time.Sleep(2 * time.Second)
		synctest.Wait()
		resp, got := e.dial().do(t, "GET http://origin.test/big HTTP/1.1\r\nHost: origin.test\r\n\r\n")
		if len(got) != len(body) || !strings.HasPrefix(resp.Header.Get("X-Cache"), "HIT") {
			t.Fatalf("after the client left: %d bytes, %q; want the whole body, stored\n%s", len(got), resp.Header.Get("X-Cache"), strings.Join(e.logLines(t), "\n"))
		}
		if n := e.net.get(e.net.requests, addrA); n != 1 {
			t.Fatalf("the parent was asked %d times; want 1", n)
		}
	})
}

// TestRelayFraming: HTTP/1.0 clients get a body whose end is the close,
// HTTP/1.1 clients a chunked one with its trailer; HEAD gets the head
// only; the client's own credentials never go to a peer (none has login
// = PASS).
func TestRelayFraming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, selection.DirectNever, nil)
		var auth []string
		e.net.handle[addrA] = func(req *http.Request, br *bufio.Reader, s net.Conn) bool {
			auth = append(auth, req.Header.Get("Proxy-Authorization"))
			if req.Method == "HEAD" {
				io.WriteString(s, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
				return true
			}
			io.WriteString(s, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n")
			return true
		}
		c := e.dial()
		resp, body := c.do(t, "GET http://origin.test/ HTTP/1.1\r\nHost: origin.test\r\nProxy-Authorization: Basic c2VjcmV0\r\n\r\n")
		if body != "hello" || resp.TransferEncoding == nil || resp.Trailer.Get("X-T") != "1" {
			t.Fatalf("HTTP/1.1: %q %v %v", body, resp.TransferEncoding, resp.Trailer)
		}
		resp, body = c.do(t, "HEAD http://origin.test/ HTTP/1.1\r\nHost: origin.test\r\n\r\n")
		if resp.ContentLength != 5 || body != "" {
			t.Fatalf("HEAD: %d %q", resp.ContentLength, body)
		}
		c10 := e.dial()
		resp, body = c10.do(t, "GET http://origin.test/ HTTP/1.0\r\nHost: origin.test\r\n\r\n")
		if body != "hello" || !resp.Close {
			t.Fatalf("HTTP/1.0: %q close %v", body, resp.Close)
		}
		for _, a := range auth {
			if a != "" {
				t.Fatalf("the client's credentials went to a peer with no login: %q", a)
			}
		}
	})
}

// TestServeListener: the proxy on a real loopback listener, with
// max_connections: a connection past it is closed unanswered and
// counted.
func TestServeListener(t *testing.T) {
	e := newEngine(t, selection.DirectNever, func(c *Config) { c.MaxConnections = 1 })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go e.proxy.Serve(ln)
	defer ln.Close()
	first, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	io.WriteString(first, "GET http://origin.test/ HTTP/1.1\r\nHost: origin.test\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(first), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("first: %v %v", resp, err)
	}
	second, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	second.SetDeadline(time.Now().Add(10 * time.Second))
	if n, err := second.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("past max_connections: read %d, %v; want the connection closed", n, err)
	}
	if e.proxy.OpenConnections() != 1 {
		t.Fatalf("%d open; want 1", e.proxy.OpenConnections())
	}
}

// TestReconfigureWhole: a generation put in force at once names the
// listener's port, the new name and the new allow list together.
func TestReconfigureWhole(t *testing.T) {
	e := newEngine(t, selection.DirectNever, nil)
	cfg := DefaultConfig()
	cfg.Name = "whole"
	cfg.Allow = MustCIDRs("192.0.2.0/24")
	e.proxy.Reconfigure(Generation{Config: cfg, Policy: e.proxy.current().policy, Port: "8080"})
	if e.proxy.Name() != "whole" || e.proxy.Allowed(netip.MustParseAddr("127.0.0.1")) || !e.proxy.Allowed(netip.MustParseAddr("192.0.2.7")) {
		t.Fatalf("name %q, allow not swapped", e.proxy.Name())
	}
	if xc := e.proxy.config().xCache[0][0]; !strings.Contains(xc, "whole:8080") {
		t.Fatalf("X-Cache-Lookup %q; want the port", xc)
	}
	if err := e.proxy.Update(Config{}); err == nil {
		t.Fatal("an invalid [proxy] was applied")
	}
}

// TestCollapsedLeaderGotNothing: the leader's parent reads the request
// and closes without answering. Its followers are answered with the
// leader's failure at once; none of them goes upstream on its own (they
// used to elect new leaders one after another, each sent again).
func TestCollapsedLeaderGotNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, selection.DirectNever, nil)
		e.proxy.SetCache(newCache(t, time.Hour))
		e.kill("b")
		e.net.handle[addrA] = func(req *http.Request, br *bufio.Reader, s net.Conn) bool {
			time.Sleep(100 * time.Millisecond) // the others join meanwhile
			return false                       // closes without an answer
		}
		const n = 8
		got := make(chan int, n)
		start := time.Now()
		for range n {
			c := e.dial()
			go func() {
				resp, _ := c.do(t, "GET http://origin.test/c HTTP/1.1\r\nHost: origin.test\r\n\r\n")
				got <- resp.StatusCode
			}()
			synctest.Wait()
		}
		for range n {
			if st := <-got; st != http.StatusBadGateway {
				t.Fatalf("status %d; want 502", st)
			}
		}
		if n, took := e.net.get(e.net.requests, addrA), time.Since(start); n != 1 || took > 200*time.Millisecond {
			t.Fatalf("the parent was asked %d times, the last answer after %v; want once, within its 100ms", n, took)
		}
	})
}

// TestBodyBrokenBeforeAnyByteLeft: the parent's answer breaks (a bad
// chunk) while its head and first chunk are still in peerd's buffer. The
// client gets a 502 made whole, never a connection closed with nothing,
// and the connection stays usable.
func TestBodyBrokenBeforeAnyByteLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, selection.DirectNever, nil)
		e.net.handle[addrA] = func(req *http.Request, br *bufio.Reader, s net.Conn) bool {
			io.WriteString(s, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n")
			return false
		}
		c := e.dial()
		resp, _ := c.do(t, "GET http://origin.test/broken HTTP/1.1\r\nHost: origin.test\r\n\r\n")
		if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("X-Peerd-Error") != CodeBadGateway {
			t.Fatalf("%d %q; want 502 bad-gateway", resp.StatusCode, resp.Header.Get("X-Peerd-Error"))
		}
		e.net.handle[addrA] = cacheable("fine")
		if resp, body := c.do(t, "GET http://origin.test/next HTTP/1.1\r\nHost: origin.test\r\n\r\n"); resp.StatusCode != 200 || body != "fine" {
			t.Fatalf("the next request on the connection: %d %q", resp.StatusCode, body)
		}
	})
}

// TestFollowerOfACutFetchGetsAHead: the fetch a follower waits on is cut
// mid-body. The follower gets what the leader's client gets, a head and a
// cut body, or, when nothing of the answer had left, a 502 made whole;
// never a connection closed with nothing on it.
func TestFollowerOfACutFetchGetsAHead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, selection.DirectNever, nil)
		e.proxy.SetCache(newCache(t, time.Hour))
		e.net.handle[addrA] = func(req *http.Request, br *bufio.Reader, s net.Conn) bool {
			time.Sleep(100 * time.Millisecond) // the follower joins meanwhile
			io.WriteString(s, "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 10\r\n\r\nhalf!")
			return false // cut
		}
		got := make(chan error, 2)
		for range 2 {
			c := e.dial()
			go func() {
				go io.WriteString(c.nc, "GET http://origin.test/cut HTTP/1.1\r\nHost: origin.test\r\n\r\n")
				resp, err := http.ReadResponse(c.br, nil)
				if err == nil && resp.StatusCode == 200 {
					_, err = io.ReadAll(resp.Body)
					if err == nil {
						err = errors.New("a whole 200 from a cut fetch")
					} else {
						err = nil // a cut after a head: what the origin did
					}
				} else if err == nil && resp.StatusCode != http.StatusBadGateway {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
				got <- err
			}()
			synctest.Wait()
		}
		for range 2 {
			if err := <-got; err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestA304ForAnotherVersionRefreshesNothing: a parent that answers 304
// by If-Modified-Since alone (the new version has the old one's
// Last-Modified) names the new version's ETag in it. Merged, that ETag
// would sit over the old body; instead the stored copy is dropped and the
// client gets the new version, fetched again without conditionals.
func TestA304ForAnotherVersionRefreshesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, selection.DirectNever, nil)
		e.proxy.SetCache(newCache(t, time.Hour))
		var mu sync.Mutex
		version := 1
		e.net.handle[addrA] = func(req *http.Request, br *bufio.Reader, s net.Conn) bool {
			io.Copy(io.Discard, req.Body)
			mu.Lock()
			v := version
			mu.Unlock()
			head := fmt.Sprintf("ETag: \"v%d\"\r\nLast-Modified: Mon, 01 Jun 2026 00:00:00 GMT\r\nCache-Control: max-age=1\r\n", v)
			if req.Header.Get("If-Modified-Since") != "" {
				io.WriteString(s, "HTTP/1.1 304 Not Modified\r\n"+head+"\r\n")
				return true
			}
			body := fmt.Sprintf("body of version %d", v)
			fmt.Fprintf(s, "HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n%s", head, len(body), body)
			return true
		}
		c := e.dial()
		get := "GET http://origin.test/doc HTTP/1.1\r\nHost: origin.test\r\n\r\n"
		if resp, body := c.do(t, get); resp.StatusCode != 200 || body != "body of version 1" {
			t.Fatalf("miss: %d %q", resp.StatusCode, body)
		}
		mu.Lock()
		version = 2
		mu.Unlock()
		time.Sleep(2 * time.Second) // stale: revalidated
		for i := 0; i < 2; i++ {
			resp, body := c.do(t, get)
			if resp.StatusCode != 200 || body != "body of version 2" || resp.Header.Get("ETag") != `"v2"` {
				t.Fatalf("request %d after the change: %d %q under ETag %s; want version 2's body under \"v2\"",
					i, resp.StatusCode, body, resp.Header.Get("ETag"))
			}
		}
		if n := e.net.get(e.net.requests, addrA); n != 3 {
			t.Fatalf("parent asked %d times; want 3 (the miss, the 304, the fetch again; then a hit)", n)
		}
	})
}
