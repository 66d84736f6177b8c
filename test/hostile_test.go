package e2e

// Hostile clients and parents (issue 20), through the binary: a parent
// that sets cookies, sends bytes past its answers or a body on HEAD;
// idle sockets from refused and allowed addresses; refusals a client must
// be able to read.

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/peerd/peerd/internal/testbed"
)

// rawParent is a parent proxy on loopback whose answers are raw bytes: a
// script returns, for each request it reads, what to write back. It
// records the request URLs it read, in order.
type rawParent struct {
	name string
	addr string
	mu   sync.Mutex
	urls []string
	conn atomic.Int64 // connections accepted
}

func newRawParent(t testing.TB, name string, answer func(r *http.Request) string) *rawParent {
	t.Helper()
	return newRawParentWith(t, name, nil, func(r *http.Request, _ io.Writer) string { return answer(r) })
}

// newRawParentWith is newRawParent speaking TLS with cfg (nil: in the
// clear), whose script may also write to the connection itself.
func newRawParentWith(t testing.TB, name string, cfg *tls.Config, answer func(r *http.Request, w io.Writer) string) *rawParent {
	t.Helper()
	rp := &rawParent{name: name}
	rp.addr = tcpServer(t, func(c net.Conn) {
		rp.conn.Add(1)
		if cfg != nil {
			c = tls.Server(c, cfg)
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			rp.mu.Lock()
			rp.urls = append(rp.urls, req.Method+" "+req.URL.String())
			rp.mu.Unlock()
			out := answer(req, c)
			if out == "" {
				return
			}
			if _, err := io.WriteString(c, out); err != nil {
				return
			}
		}
	})
	return rp
}

func (rp *rawParent) peerName() string { return rp.name }
func (rp *rawParent) port() string {
	_, p, _ := net.SplitHostPort(rp.addr)
	return p
}

// seen counts the requests for URLs containing s.
func (rp *rawParent) seen(s string) int {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	n := 0
	for _, u := range rp.urls {
		if strings.Contains(u, s) {
			n++
		}
	}
	return n
}

func okAnswer(fields, body string) string {
	return fmt.Sprintf("HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n%s", fields, len(body), body)
}

func get(t *testing.T, c *http.Client, url string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// TestSetCookieNeverReplayed: a response that sets a cookie is stored
// without it (the client it was for gets it, nobody else); a page that
// sets a cookie and is only heuristically fresh is not stored at all; a
// collapsed follower never gets the leader's cookie.
func TestSetCookieNeverReplayed(t *testing.T) {
	t.Parallel()
	var slow atomic.Bool
	n := atomic.Int64{}
	par := newRawParent(t, "a", func(r *http.Request) string {
		id := n.Add(1)
		cookie := fmt.Sprintf("Set-Cookie: SESSIONID=user%d\r\n", id)
		switch {
		case strings.HasSuffix(r.URL.Path, "/explicit"):
			return okAnswer("Cache-Control: max-age=60\r\n"+cookie, "page")
		case strings.HasSuffix(r.URL.Path, "/heuristic"):
			return okAnswer("Last-Modified: Mon, 01 Jan 2024 00:00:00 GMT\r\nDate: "+time.Now().UTC().Format(http.TimeFormat)+"\r\n"+cookie, "page")
		case strings.HasSuffix(r.URL.Path, "/collapsed"):
			if slow.Load() {
				time.Sleep(500 * time.Millisecond)
			}
			return okAnswer("Cache-Control: max-age=60\r\n"+cookie, "page")
		}
		return "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
	})
	p := startPeerd(t, baseConfig+peerBlock("", par))
	c := p.client()

	first, _ := get(t, c, "http://o.test/explicit")
	if first.Header.Get("Set-Cookie") == "" {
		t.Fatal("the client the cookie was for did not get it")
	}
	second, _ := get(t, c, "http://o.test/explicit")
	if v := second.Header.Get("Set-Cookie"); v != "" || !strings.Contains(second.Header.Get("Cache-Status"), "hit") {
		t.Fatalf("second client: Set-Cookie %q, Cache-Status %q; want a hit without the first client's cookie", v, second.Header.Get("Cache-Status"))
	}

	get(t, c, "http://o.test/heuristic")
	h, _ := get(t, c, "http://o.test/heuristic")
	if par.seen("/heuristic") != 2 {
		t.Fatalf("a heuristically fresh page with Set-Cookie went to the parent %d times for 2 requests; want it not stored", par.seen("/heuristic"))
	}
	if strings.Contains(h.Header.Get("Cache-Status"), "hit") {
		t.Fatalf("Cache-Status %q; want a miss", h.Header.Get("Cache-Status"))
	}

	slow.Store(true)
	var wg sync.WaitGroup
	var cookies atomic.Int64
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Get("http://o.test/collapsed")
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.Header.Get("Set-Cookie") != "" {
				cookies.Add(1)
			}
		}()
	}
	wg.Wait()
	if got := par.seen("/collapsed"); cookies.Load() != int64(got) {
		t.Fatalf("%d of 6 collapsed clients got a cookie for %d parent requests; only the client each answer was for may", cookies.Load(), got)
	}
}

// TestExtraBytesNeverAnswer: bytes a parent sends past the end of its
// answer (after a no-store answer, or a body on HEAD) never answer
// another request and are never stored.
func TestExtraBytesNeverAnswer(t *testing.T) {
	t.Parallel()
	poison := okAnswer("Cache-Control: max-age=3600\r\n", "POISON")
	par := newRawParent(t, "a", func(r *http.Request) string {
		switch {
		case strings.HasSuffix(r.URL.Path, "/extra"):
			return okAnswer("Cache-Control: no-store\r\n", "first") + poison
		case r.Method == "HEAD":
			return "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
		}
		return okAnswer("Cache-Control: no-store\r\n", "real:"+r.URL.Path)
	})
	p := startPeerd(t, baseConfig+peerBlock("", par))
	c := p.client()
	for i := 0; i < 3; i++ {
		if _, b := get(t, c, "http://o.test/extra"); b != "first" {
			t.Fatalf("/extra answered %q", b)
		}
		for _, path := range []string{"/u1", "/u2"} {
			if _, b := get(t, c, "http://o.test"+path); b != "real:"+path {
				t.Fatalf("GET %s answered %q; a parent's extra bytes answered it", path, b)
			}
		}
	}
	for i := 0; i < 3; i++ {
		req, _ := http.NewRequest("HEAD", "http://o.test/head", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if _, b := get(t, c, "http://o.test/after-head"); b != "real:/after-head" {
			t.Fatalf("GET after a HEAD answered with a body: %q", b)
		}
	}
	waitFor(t, "the extra bytes counted", 5*time.Second, func() bool {
		return strings.Contains(p.adminMetrics(), `peerd_unsolicited_responses_total{hop="a"}`)
	})
	waitFor(t, "the extra bytes logged", 5*time.Second, func() bool {
		return strings.Contains(p.logs(), "next hop sent bytes past the end of its answer")
	})
}

// TestOnlyIfCachedWithBodyNotForwarded: only-if-cached is answered 504
// whatever the request carries.
func TestOnlyIfCachedWithBodyNotForwarded(t *testing.T) {
	t.Parallel()
	par := newRawParent(t, "a", func(r *http.Request) string { return okAnswer("", "x") })
	p := startPeerd(t, baseConfig+peerBlock("", par))
	for _, m := range []string{"GET", "POST"} {
		resp := raw(t, p, m+" http://o.test/oic HTTP/1.1\r\nHost: o.test\r\nCache-Control: only-if-cached\r\nContent-Length: 3\r\n\r\nabc")
		if resp.StatusCode != 504 || resp.Header.Get("X-Peerd-Error") != "not-cached" {
			t.Fatalf("%s only-if-cached with a body: %d %q; want 504 not-cached", m, resp.StatusCode, resp.Header.Get("X-Peerd-Error"))
		}
	}
	if n := par.seen("/oic"); n != 0 {
		t.Fatalf("only-if-cached went to the parent %d times", n)
	}
}

// dialFrom connects to addr from a local loopback address.
func dialFrom(t *testing.T, local, addr string) (net.Conn, error) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 2 * time.Second}
	return d.Dial("tcp", addr)
}

// TestRefusedSourcesCannotExhaust: idle connections from a source
// outside [proxy] allow take no max_connections slot; one allowed source
// cannot take them all either; a connection that says nothing goes after
// request_start_timeout; a refusal is readable even when the client sent
// a body peerd never read.
func TestRefusedSourcesCannotExhaust(t *testing.T) {
	par := newRawParent(t, "a", func(r *http.Request) string { return okAnswer("", "ok") })
	cfg := withProxy(baseConfig, `allow = ["127.0.0.1/32", "127.0.0.3/32"]`, "max_connections = 40",
		"max_connections_per_source = 10", `request_start_timeout = "1s"`)
	p := startPeerd(t, cfg+peerBlock("", par))
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	for i := 0; i < 100; i++ {
		c, err := dialFrom(t, "127.0.0.2", p.proxy)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	for i := 0; i < 10; i++ {
		c, err := dialFrom(t, "127.0.0.3", p.proxy)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "GET http://o.test/hold HTTP/1.1\r\nHost: o.test\r\n\r\n")
		held = append(held, c)
	}
	// The allowed client is served while 100 refused and 10 allowed
	// connections are open.
	if _, b := get(t, p.client(), "http://o.test/x"); b != "ok" {
		t.Fatalf("allowed client got %q", b)
	}
	// The eleventh from 127.0.0.3 is closed at once.
	c, err := dialFrom(t, "127.0.0.3", p.proxy)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET http://o.test/y HTTP/1.1\r\nHost: o.test\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || isTimeoutErr(err) {
		t.Fatalf("a connection past max_connections_per_source: read %d, %v; want it closed", n, err)
	}
	c.Close()
	// A connection that never sends is closed after request_start_timeout.
	idle, err := dialFrom(t, "127.0.0.1", p.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	if _, err := idle.Read(make([]byte, 1)); err == nil || isTimeoutErr(err) {
		t.Fatalf("a silent connection stayed open: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a silent connection was closed after %v; want about request_start_timeout (1s)", d)
	}
	// A refused source with a body peerd does not read still reads its
	// 403 (a lingering close, not a reset).
	r, err := dialFrom(t, "127.0.0.4", p.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	body := strings.Repeat("x", 200<<10)
	wrote := make(chan struct{})
	go func() {
		io.WriteString(r, "POST http://o.test/p HTTP/1.1\r\nHost: o.test\r\nContent-Length: "+fmt.Sprint(len(body))+"\r\n\r\n"+body)
		close(wrote)
	}()
	select {
	case <-wrote:
	case <-time.After(2 * time.Second):
	}
	time.Sleep(100 * time.Millisecond)
	r.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(r), nil)
	if err != nil {
		t.Fatalf("reading the refusal: %v", err)
	}
	if resp.StatusCode != 403 || resp.Header.Get("X-Peerd-Error") != "access-denied" {
		t.Fatalf("refused source: %d %q; want 403 access-denied", resp.StatusCode, resp.Header.Get("X-Peerd-Error"))
	}
}

func isTimeoutErr(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestRefusalsReadable: 431 and 400 answers reach a client that sent more
// than peerd read, instead of a reset.
func TestRefusalsReadable(t *testing.T) {
	t.Parallel()
	par := newRawParent(t, "a", func(r *http.Request) string { return okAnswer("", "ok") })
	p := startPeerd(t, baseConfig+peerBlock("", par))
	for _, tc := range []struct {
		name, req string
		want      int
	}{
		{"431", "GET http://o.test/ HTTP/1.1\r\nHost: o.test\r\nX-Big: " + strings.Repeat("a", 70<<10) + "\r\n\r\n" + strings.Repeat("junk", 50<<10), 431},
		{"400", "GET http://o.test/ HTTP/1.1\r\nHost: o.test\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n" + strings.Repeat("junk", 50<<10), 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", p.proxy)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// The whole request is sent before the answer is read, as a
			// slow client would: an answer followed by a reset is lost.
			wrote := make(chan struct{})
			go func() { io.WriteString(c, tc.req); close(wrote) }()
			select {
			case <-wrote:
			case <-time.After(2 * time.Second):
			}
			time.Sleep(100 * time.Millisecond) // let the close happen first: the loss this test is about
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("reading the %s: %v", tc.name, err)
			}
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d; want %d", resp.StatusCode, tc.want)
			}
		})
	}
}

// TestCollapsedFollowersWatchTheirClients: followers whose clients hung
// up while a slow leader waits hold no connection slot and send nothing
// upstream; when a leader fails, the followers elect one new leader
// instead of all going to the parent.
func TestCollapsedFollowersWatchTheirClients(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var fails atomic.Int64
	par := newRawParent(t, "a", func(r *http.Request) string {
		switch {
		case strings.HasSuffix(r.URL.Path, "/slow"):
			<-release
			return okAnswer("Cache-Control: no-store\r\n", "slow")
		case strings.HasSuffix(r.URL.Path, "/fails-once"):
			if fails.Add(1) == 1 {
				time.Sleep(300 * time.Millisecond)
				return "" // the connection closes with no answer
			}
			return okAnswer("Cache-Control: max-age=60\r\n", "second leader")
		}
		return okAnswer("", "fast")
	})
	cfg := withProxy(baseConfig, "max_connections = 30", `forward_max_tries = 1`)
	p := startPeerd(t, cfg+peerBlock("", par))
	defer close(release)

	// 25 clients ask for the slow URL and hang up.
	for i := 0; i < 25; i++ {
		c, err := net.Dial("tcp", p.proxy)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "GET http://o.test/slow HTTP/1.1\r\nHost: o.test\r\n\r\n")
		defer c.Close()
		if i > 0 {
			time.AfterFunc(200*time.Millisecond, func() { c.Close() })
		}
	}
	// Once they are gone their slots are free: 20 clients at once are
	// served while the leader still waits.
	waitFor(t, "the followers to leave", 10*time.Second, func() bool {
		var wg sync.WaitGroup
		var ok atomic.Int64
		for i := 0; i < 20; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(mustURL("http://" + p.proxy)), DisableKeepAlives: true}, Timeout: 5 * time.Second}
				if resp, err := c.Get(fmt.Sprintf("http://o.test/fast%d", i)); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == 200 {
						ok.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		return ok.Load() == 20
	})
	if n := par.seen("/slow"); n != 1 {
		t.Fatalf("the slow URL went upstream %d times while its followers' clients were gone; want 1 (the leader)", n)
	}

	// A failing leader: the followers elect one new leader.
	var wg sync.WaitGroup
	bodies := make(chan string, 10)
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(mustURL("http://" + p.proxy))}, Timeout: 10 * time.Second}
			resp, err := c.Get("http://o.test/fails-once")
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			bodies <- fmt.Sprint(resp.StatusCode, " ", string(b))
		}()
		if i == 0 {
			waitFor(t, "the first leader to reach the parent", 5*time.Second, func() bool { return par.seen("/fails-once") == 1 })
		}
	}
	wg.Wait()
	close(bodies)
	good := 0
	for b := range bodies {
		if b == "200 second leader" {
			good++
		}
	}
	if good < 9 {
		t.Fatalf("%d of 10 clients got the second leader's answer; want at least 9 (only the failed leader's may fail)", good)
	}
	if n := par.seen("/fails-once"); n != 2 {
		t.Fatalf("the parent got %d requests for the failing URL; want 2 (one failed leader, one new leader)", n)
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// TestNonCanonicalHostsDenied: deny_to cannot be bypassed through a
// parent by writing a denied host as a parent would read it differently
// (inet_aton forms, trailing dots, empty labels); what is forwarded is
// the canonical spelling.
func TestNonCanonicalHostsDenied(t *testing.T) {
	t.Parallel()
	par := newRawParent(t, "a", func(r *http.Request) string { return okAnswer("", "via parent: "+r.URL.Host) })
	p := startPeerd(t, baseConfig+"deny_to = [\"127.0.0.0/8\", \".blocked.example\"]\n"+peerBlock("", par))
	for _, host := range []string{"2130706433", "127.1", "0x7f.0.0.1", "0177.0.0.1", "127.0.0.1.", "0x7f000001",
		"www.blocked.example.", "www.blocked.example..", "WWW.Blocked.Example"} {
		for _, req := range []string{
			"GET http://" + host + "/ HTTP/1.1\r\nHost: " + host + "\r\n\r\n",
			"CONNECT " + host + ":443 HTTP/1.1\r\nHost: " + host + ":443\r\n\r\n",
		} {
			resp := rawBody(t, p, req)
			if resp.status != 403 || !strings.Contains(resp.body, "deny_to") {
				t.Fatalf("%q: %d %q; want 403 deny_to", req, resp.status, resp.body)
			}
		}
	}
	for _, host := range []string{"a..b", "1.2.3.999", "foo.123"} {
		resp := rawBody(t, p, "GET http://"+host+"/ HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		if resp.status != 400 || resp.code != "bad-request" {
			t.Fatalf("host %q: %d %q; want 400 bad-request", host, resp.status, resp.code)
		}
	}
	if n := par.seen(""); n != 0 {
		t.Fatalf("%d denied requests reached the parent", n)
	}
	// Allowed hosts go out in their canonical spelling.
	for host, want := range map[string]string{"0x0a.1": "10.0.0.1", "allowed.example.": "allowed.example"} {
		resp := rawBody(t, p, "GET http://"+host+"/ HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		if resp.status != 200 || resp.body != "via parent: "+want {
			t.Fatalf("%s: %d %q; want the parent to see %s", host, resp.status, resp.body, want)
		}
	}
}

// TestUnstorableNotReportedStored: a response over max_object is relayed
// whole and never said to be stored; one of an eighth of [cache] memory
// (over the sixteenth a shard of the store once had, which refused it) is
// stored, and the next request is a hit.
func TestUnstorableNotReportedStored(t *testing.T) {
	t.Parallel()
	big, large := strings.Repeat("b", 5<<20), strings.Repeat("l", 2<<20)
	par := newRawParent(t, "a", func(r *http.Request) string {
		if strings.HasSuffix(r.URL.Path, "/big") {
			return okAnswer("Cache-Control: max-age=600\r\n", big)
		}
		return okAnswer("Cache-Control: max-age=600\r\n", large)
	})
	p := startPeerd(t, baseConfig+"[cache]\nmemory = \"16MiB\"\nmax_object = \"4MiB\"\n"+peerBlock("", par))
	for i := 0; i < 2; i++ {
		resp, b := get(t, p.client(), "http://o.test/big")
		if len(b) != len(big) {
			t.Fatalf("got %d bytes of %d", len(b), len(big))
		}
		if cs := resp.Header.Get("Cache-Status"); strings.Contains(cs, "stored") || strings.Contains(cs, "hit") {
			t.Fatalf("Cache-Status %q for a response over max_object", cs)
		}
	}
	for i := 0; i < 2; i++ {
		resp, b := get(t, p.client(), "http://o.test/large")
		cs := resp.Header.Get("Cache-Status")
		if len(b) != len(large) || i == 0 && !strings.Contains(cs, "stored") || i == 1 && !strings.Contains(cs, "hit") {
			t.Fatalf("request %d for an eighth of memory: %d bytes, Cache-Status %q; want it stored, then a hit", i, len(b), cs)
		}
	}
}

// TestPlanShowsDenials: GET /plan says when a request would be refused
// before any plan is walked, instead of showing hops it would never use.
func TestPlanShowsDenials(t *testing.T) {
	t.Parallel()
	par := newRawParent(t, "a", func(r *http.Request) string { return okAnswer("", "x") })
	p := startPeerd(t, withProxy(baseConfig, `allow = ["127.0.0.0/8"]`)+"deny_to = [\"192.0.2.0/24\"]\n"+peerBlock("", par))
	type plan struct {
		Hops   []struct{ Peer string } `json:"hops"`
		Denied string                  `json:"denied"`
	}
	for q, want := range map[string]string{
		"/plan?url=" + url.QueryEscape("http://0xc0.0.2.7/"):                      "destination-denied",
		"/plan?url=" + url.QueryEscape("http://ok.example:25/"):                   "safe_ports",
		"/plan?url=" + url.QueryEscape("http://ok.example/") + "&client=10.1.1.1": "access-denied",
		"/plan?url=" + url.QueryEscape("http://a..b/"):                            "bad-request",
		"/plan?url=" + url.QueryEscape("http://ok.example/"):                      "",
	} {
		var got plan
		if code := p.adminJSON("GET", q, "", &got); code != 200 {
			t.Fatalf("%s: %d", q, code)
		}
		if !strings.Contains(got.Denied, want) || (want == "") != (got.Denied == "") {
			t.Fatalf("%s: denied %q; want %q", q, got.Denied, want)
		}
		if (want == "") != (len(got.Hops) > 0) {
			t.Fatalf("%s: hops %+v with denial %q", q, got.Hops, got.Denied)
		}
	}
}

// TestLateExtraBytesNeverAnswer: an answer a parent sends on an idle
// keep-alive connection, long after the answer before it, never answers
// the next request, over TLS to the parent as well as in the clear: the
// connection is closed and counted (the look at an idle TLS connection
// used to see nothing, and took its bytes for the next answer).
func TestLateExtraBytesNeverAnswer(t *testing.T) {
	t.Parallel()
	caPath, certPath, keyPath, err := testbed.WriteCA(t.TempDir(), "localhost")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tls  *tls.Config
		keys string
	}{
		{"clear", nil, ""},
		{"tls", &tls.Config{Certificates: []tls.Certificate{cert}}, fmt.Sprintf("tls = true\ntls_ca = %q\n", caPath)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The answer to /extra is followed, on release, by a second,
			// cacheable one nobody asked for: bytes that reach an idle
			// pooled connection well after the answer, not in its read.
			release, written := make(chan struct{}), make(chan struct{})
			par := newRawParentWith(t, "a", tc.tls, func(r *http.Request, w io.Writer) string {
				answer := okAnswer("Cache-Control: no-store\r\n", "real:"+r.URL.Path)
				if r.URL.Path != "/extra" {
					return answer
				}
				io.WriteString(w, answer)
				<-release
				io.WriteString(w, okAnswer("Cache-Control: max-age=3600\r\n", "POISON"))
				close(written)
				return "" // the connection ends here
			})
			p := startPeerd(t, baseConfig+peerBlock(tc.keys, par))
			c := p.client()
			if _, b := get(t, c, "http://o.test/extra"); b != "real:/extra" {
				t.Fatalf("/extra answered %q", b)
			}
			close(release)
			select {
			case <-written:
			case <-time.After(5 * time.Second):
				t.Fatal("the parent did not send its extra answer")
			}
			for _, path := range []string{"/u1", "/u2"} {
				if _, b := get(t, c, "http://o.test"+path); b != "real:"+path {
					t.Fatalf("GET %s answered %q; the parent's late extra answer answered it", path, b)
				}
			}
			waitFor(t, "the extra bytes counted", 5*time.Second, func() bool {
				return strings.Contains(p.adminMetrics(), `peerd_unsolicited_responses_total{hop="a"}`)
			})
		})
	}
}

// TestTraceContextPassesToTheParent: W3C trace context (traceparent,
// tracestate) reaches the next hop as the client sent it, so a trace
// spans the proxy hierarchy.
func TestTraceContextPassesToTheParent(t *testing.T) {
	t.Parallel()
	got := make(chan [2]string, 4)
	par := newRawParent(t, "a", func(r *http.Request) string {
		got <- [2]string{r.Header.Get("Traceparent"), r.Header.Get("Tracestate")}
		return okAnswer("Cache-Control: no-store\r\n", "traced")
	})
	p := startPeerd(t, baseConfig+peerBlock("", par))
	req, _ := http.NewRequest("GET", "http://o.test/traced", nil)
	const tp, ts = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "congo=t61rcWkgMzE"
	req.Header.Set("traceparent", tp)
	req.Header.Set("tracestate", ts)
	resp, err := p.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	select {
	case h := <-got:
		if h[0] != tp || h[1] != ts {
			t.Fatalf("the parent saw traceparent %q, tracestate %q; want the client's", h[0], h[1])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the parent")
	}
}
