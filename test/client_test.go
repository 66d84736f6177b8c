package e2e

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// raw sends bytes to peerd's proxy port and returns the first response.
func raw(t *testing.T, p *peerd, req string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", p.proxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, req)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading response to %q: %v", req, err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp
}

func TestClientSideChecks(t *testing.T) {
	t.Parallel()
	a := newFakeParent(t, "a")
	p := startPeerd(t, baseConfig+peerBlock("", a))
	big := strings.Repeat("x", 70<<10)
	for _, tc := range []struct {
		name string
		req  string
		want string // "status code"
	}{
		{"origin-form is not a proxy request", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "400 bad-request"},
		{"loop", "GET http://o.test/ HTTP/1.1\r\nHost: o.test\r\nVia: 1.1 other, 1.1 peerd (peerd/1)\r\n\r\n", "508 loop-detected"},
		{"CL and TE together", "POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nG", "400 bad-request"},
		{"conflicting CLs", "POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", "400 "},
		{"bad chunking", "POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", "400 bad-request"},
		{"headers too large", "GET http://o.test/ HTTP/1.1\r\nHost: o.test\r\nX-Big: " + big + "\r\n\r\n", "431 "},
		{"bad CONNECT target", "CONNECT nowhere HTTP/1.1\r\nHost: nowhere\r\n\r\n", "400 bad-request"},
		{"Max-Forwards 0 on OPTIONS", "OPTIONS http://o.test/ HTTP/1.1\r\nHost: o.test\r\nMax-Forwards: 0\r\n\r\n", "200 "},
		{"ordinary GET", "GET http://o.test/ok HTTP/1.1\r\nHost: o.test\r\n\r\n", "200 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := raw(t, p, tc.req)
			got := fmt.Sprintf("%d %s", resp.StatusCode, resp.Header.Get("X-Peerd-Error"))
			if got != tc.want && !(strings.HasSuffix(tc.want, " ") && strings.HasPrefix(got, tc.want)) {
				t.Fatalf("got %q; want %q", got, tc.want)
			}
		})
	}
	if n := a.requests("POST"); n != 0 {
		t.Fatalf("%d rejected POSTs reached the parent", n)
	}
	if n := a.requests("OPTIONS"); n != 0 {
		t.Fatal("Max-Forwards: 0 was forwarded")
	}
}

// TestTraceEchoHidesSecrets: peerd answers a TRACE with Max-Forwards: 0
// itself, echoing the request, but not the credentials and cookies in it
// (RFC 9110 9.3.8): an echoed Cookie is what cross-site tracing steals.
func TestTraceEchoHidesSecrets(t *testing.T) {
	t.Parallel()
	a := newFakeParent(t, "a")
	p := startPeerd(t, baseConfig+peerBlock("", a))
	c, err := net.Dial("tcp", p.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "TRACE http://o.test/t HTTP/1.1\r\nHost: o.test\r\nMax-Forwards: 0\r\nX-Mine: kept\r\n"+
		"Cookie: session=SECRET1\r\nauthorization: Basic U0VDUkVUMg==\r\nProxy-Authorization: Basic U0VDUkVUMw==\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "message/http" {
		t.Fatalf("%d %q; want 200 message/http", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	b := string(body)
	if !strings.HasPrefix(b, "TRACE http://o.test/t HTTP/1.1\r\n") || !strings.Contains(b, "X-Mine: kept\r\n") {
		t.Fatalf("echo %q; want the request line and its other fields", b)
	}
	for _, secret := range []string{"SECRET1", "U0VDUkVUMg", "U0VDUkVUMw", "ookie", "uthorization"} {
		if strings.Contains(b, secret) {
			t.Fatalf("echo %q holds %q", b, secret)
		}
	}
	if n := a.requests("TRACE"); n != 0 {
		t.Fatal("TRACE with Max-Forwards: 0 was forwarded")
	}
}

func TestAccessDenied(t *testing.T) {
	t.Parallel()
	// (A parent, or the config could never forward: -check refuses it.)
	a := newFakeParent(t, "a")
	p := startPeerd(t, withProxy(baseConfig, "allow = [\"10.0.0.0/8\"]")+peerBlock("", a))
	resp := raw(t, p, "GET http://o.test/ HTTP/1.1\r\nHost: o.test\r\n\r\n")
	if resp.StatusCode != 403 || resp.Header.Get("X-Peerd-Error") != "access-denied" {
		t.Fatalf("%d %q; want 403 access-denied", resp.StatusCode, resp.Header.Get("X-Peerd-Error"))
	}
}

func TestHeadersToParents(t *testing.T) {
	t.Parallel()
	a := newFakeParent(t, "a")
	s := newFakeParent(t, "s")
	p := startPeerd(t, baseConfig+peerBlock(`login = "bob:pw"`, a)+peerBlock(`type = "sibling"`, s))
	req, _ := http.NewRequest("GET", "http://o.test/h", nil)
	req.Header.Set("Proxy-Authorization", "Basic Y2xpZW50OnNlY3JldA==")
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "must-go")
	req.Header.Set("X-Forwarded-For", "192.0.2.1")
	resp, err := p.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	b := string(body)
	if !strings.HasPrefix(b, "from a: GET http://o.test/h") {
		t.Fatalf("parent got %q; want the absolute URI (sibling 504 is a miss)", b)
	}
	if !strings.Contains(b, "auth=Basic Ym9iOnB3") || strings.Contains(b, "Y2xpZW50") {
		t.Fatalf("Proxy-Authorization to the parent: %q; want the peer's login only", b)
	}
	if !strings.Contains(b, "xff=192.0.2.1, 127.0.0.1") {
		t.Fatalf("X-Forwarded-For not appended: %q", b)
	}
	if s.requests("GET") != 1 {
		t.Fatalf("sibling asked %d times; want 1 (only-if-cached)", s.requests("GET"))
	}
	if st := p.peer("s"); st.ConnectFailuresTotal != 0 || st.State != "alive" {
		t.Fatalf("sibling miss counted as failure: %+v", st)
	}
}

func TestHTTPSemantics(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/204":
			w.WriteHeader(204)
		case "/304":
			w.WriteHeader(304)
		case "/trailer":
			w.Header().Set("Trailer", "X-Sum")
			io.WriteString(w, "body")
			w.Header().Set("X-Sum", "42")
		case "/stream":
			for i := 0; i < 3; i++ {
				fmt.Fprintf(w, "chunk%d;", i)
				w.(http.Flusher).Flush()
				time.Sleep(50 * time.Millisecond)
			}
		case "/echo":
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s %d", r.Method, len(b))
		default:
			w.Header().Set("Content-Length", "5")
			io.WriteString(w, "hello")
		}
	})
	p := startPeerd(t, directConfig)
	c := p.client()
	get := func(method, path string, body io.Reader) (*http.Response, string) {
		req, _ := http.NewRequest(method, "http://"+origin+path, body)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	if resp, b := get("HEAD", "/", nil); resp.StatusCode != 200 || b != "" || resp.ContentLength != 5 {
		t.Fatalf("HEAD: %d %q len %d", resp.StatusCode, b, resp.ContentLength)
	}
	for _, code := range []string{"204", "304"} {
		if resp, b := get("GET", "/"+code, nil); fmt.Sprint(resp.StatusCode) != code || b != "" {
			t.Fatalf("%s: %d %q", code, resp.StatusCode, b)
		}
	}
	if resp, b := get("GET", "/trailer", nil); b != "body" || resp.Trailer.Get("X-Sum") != "42" {
		t.Fatalf("trailer: %q %v", b, resp.Trailer)
	}
	if _, b := get("GET", "/stream", nil); b != "chunk0;chunk1;chunk2;" {
		t.Fatalf("stream: %q", b)
	}
	// A large chunked upload streams through (beyond max_retry_body).
	big := strings.Repeat("y", 1<<20)
	if _, b := get("POST", "/echo", io.MultiReader(strings.NewReader(big))); b != fmt.Sprintf("POST %d", len(big)) {
		t.Fatalf("upload: %q", b)
	}
	// Expect: 100-continue is honoured.
	req, _ := http.NewRequest("PUT", "http://"+origin+"/echo", strings.NewReader("abc"))
	req.Header.Set("Expect", "100-continue")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "PUT 3" {
		t.Fatalf("100-continue PUT: %q", b)
	}
}

func tlsClient(p *peerd) *http.Client {
	u, _ := url.Parse("http://" + p.proxy)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 10 * time.Second}
}

func TestConnectTunnels(t *testing.T) {
	t.Parallel()
	tlsOrigin := httptest.NewTLSServer(http.HandlerFunc(originHandler))
	defer tlsOrigin.Close()
	t.Run("direct", func(t *testing.T) {
		p := startPeerd(t, directConfig)
		c := tlsClient(p)
		defer c.CloseIdleConnections() // ends the tunnel, so shutdown need not wait
		resp, err := c.Get(tlsOrigin.URL + "/d")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "origin /d" {
			t.Fatalf("%q", b)
		}
	})
	t.Run("through a parent, after a refused one", func(t *testing.T) {
		dead := newFakeParent(t, "dead")
		a := newFakeParent(t, "a")
		p := startPeerd(t, baseConfig+peerBlock("", dead, a))
		dead.stop()
		c := tlsClient(p)
		defer c.CloseIdleConnections()
		resp, err := c.Get(tlsOrigin.URL + "/t")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "origin /t" || a.requests("CONNECT") != 1 {
			t.Fatalf("%q, parent CONNECTs %d", b, a.requests("CONNECT"))
		}
		if st := p.peer("dead"); st.ConnectFailuresTotal-st.ProbeFailuresTotal != 1 {
			t.Fatalf("tunnel connect failure not counted once: %+v", st)
		}
		if st := p.peer("a"); st.ConnectsTotal < 2 {
			t.Fatalf("tunnel connect success not counted: %+v", st)
		}
	})
	t.Run("parent refusal passed through", func(t *testing.T) {
		a := newFakeParent(t, "a")
		p := startPeerd(t, baseConfig+peerBlock("", a))
		a.setMode("deny-connect")
		resp := raw(t, p, "CONNECT 127.0.0.1:9 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n")
		if resp.StatusCode != 403 || resp.Header.Get("X-Peerd-Peer") != "a" {
			t.Fatalf("%d %v; want the parent's 403", resp.StatusCode, resp.Header)
		}
		if st := p.peer("a"); st.State != "alive" || st.ConnectFailuresTotal != 0 {
			t.Fatalf("a CONNECT refusal counted: %+v", st)
		}
	})
}

// TestConnectHalfClose: a tunnel passes a client's half-close to the
// origin and the origin's answer back after it.
func TestConnectHalfClose(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c) // until the client's half-close
		fmt.Fprintf(c, "got %d bytes", len(b))
	}()
	for _, via := range []string{"direct", "parent"} {
		t.Run(via, func(t *testing.T) {
			cfg := directConfig
			if via == "parent" {
				a := newFakeParent(t, "a")
				cfg = baseConfig + peerBlock("", a)
			}
			p := startPeerd(t, cfg)
			c, err := net.Dial("tcp", p.proxy)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", ln.Addr(), ln.Addr())
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("CONNECT: %v %v", resp, err)
			}
			io.WriteString(c, "hello")
			c.(*net.TCPConn).CloseWrite()
			rest, _ := io.ReadAll(br)
			if string(rest) != "got 5 bytes" {
				t.Fatalf("after half-close got %q", rest)
			}
		})
		if via == "direct" {
			// the origin goroutine serves one connection; start another
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				b, _ := io.ReadAll(c)
				fmt.Fprintf(c, "got %d bytes", len(b))
			}()
		}
	}
}

// TestUpgradeThroughPeerd: an Upgrade (WebSocket-style) exchange over a
// plain-HTTP proxy request is switched and bytes flow both ways.
func TestUpgradeThroughPeerd(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "want Upgrade: echo", 400)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		line, _ := brw.ReadString('\n')
		io.WriteString(c, "echo: "+line)
	})
	p := startPeerd(t, directConfig+"upgrade = [\"echo\"]\n")
	c, err := net.Dial("tcp", p.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET http://%s/ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", origin, origin)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	io.WriteString(c, "hi\n")
	line, _ := br.ReadString('\n')
	if line != "echo: hi\n" {
		t.Fatalf("got %q", line)
	}
}
