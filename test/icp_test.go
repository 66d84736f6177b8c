package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peerd/peerd/icp"
)

// ICP (RFC 2186) end to end, with real Squid on both sides (contract
// section 15).

// freeUDPPort is an unused UDP port on 127.0.0.1.
func freeUDPPort(t testing.TB) string {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, p, _ := net.SplitHostPort(c.LocalAddr().String())
	return p
}

// squidICP is the squid.conf for answering and sending ICP on
// 127.0.0.1:port, to anyone on loopback. Squid ignores ICP datagrams from
// its own ICP address (127.0.0.1), so peerd's ICP lives on 127.0.0.2 in
// these tests (its queries go out from its [icp] listen address).
func squidICP(port string) string {
	return fmt.Sprintf("icp_port %s\nudp_incoming_address 127.0.0.1\nacl loopback src 127.0.0.0/8\nicp_access allow loopback\nicp_access deny all\n", port)
}

// peerdICP is peerd's [icp] table on 127.0.0.2.
func peerdICP(t testing.TB) (table, port string) {
	port = freeUDPPort(t)
	return fmt.Sprintf("\n[icp]\nlisten = \"127.0.0.2:%s\"\n", port), port
}

// cacheableParent is a fake parent whose answers may be stored for 10 min.
func cacheableParent(t *testing.T, name string) *fakeParent {
	f := newFakeParent(t, name)
	f.SetHeader("Cache-Control", "max-age=600")
	return f
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, _ := os.ReadFile(path)
	return string(b)
}

// A Squid child has peerd as an ICP sibling: what peerd holds is a
// SIBLING_HIT in Squid's log; the rest Squid fetches from its own parent,
// and peerd is never asked to fetch it.
func TestICPSquidChildAsksPeerd(t *testing.T) {
	t.Parallel()
	up := cacheableParent(t, "up")
	icpTable, peerdICPPort := peerdICP(t)
	logPath := t.TempDir() + "/access.log"
	cfg := strings.Replace(addAccessLog(baseConfig, logPath), `listen = "127.0.0.1:0"`, `listen = "127.0.0.2:0"`, 1)
	p := startPeerd(t, cfg+icpTable+peerBlock("", up))
	waitFor(t, "up alive", 5*time.Second, func() bool { return p.peer("up").State == "alive" })
	cl := p.client()
	if r := do(cl, "GET", "http://origin.test/stored", ""); r.status != 200 {
		t.Fatalf("priming peerd: %s", r)
	}
	_, peerdHTTP, _ := net.SplitHostPort(p.proxy)
	child := startSquid(t, "sqchild", squidICP(freeUDPPort(t))+
		fmt.Sprintf("cache_peer 127.0.0.2 sibling %s %s name=peerd\n", peerdHTTP, peerdICPPort)+
		fmt.Sprintf("cache_peer 127.0.0.1 parent %s 0 no-query default name=up\n", up.port())+
		"never_direct allow all\n")
	sc := proxyClientFor(t, child.addr)
	if r := do(sc, "GET", "http://origin.test/stored", ""); r.status != 200 {
		t.Fatalf("GET stored through Squid: %s", r)
	}
	if r := do(sc, "GET", "http://origin.test/not-stored", ""); r.status != 200 {
		t.Fatalf("GET not-stored through Squid: %s", r)
	}
	var stored, other string
	waitFor(t, "Squid logging both requests", 5*time.Second, func() bool {
		stored, other = "", ""
		for _, l := range child.accessLog() {
			switch {
			case strings.Contains(l, "/stored "):
				stored = l
			case strings.Contains(l, "/not-stored "):
				other = l
			}
		}
		return stored != "" && other != ""
	})
	if !strings.Contains(stored, "SIBLING_HIT/127.0.0.2") {
		t.Errorf("Squid's line for a URL peerd holds: %q; want SIBLING_HIT", stored)
	}
	if strings.Contains(other, "SIBLING_HIT") || !strings.Contains(other, "PARENT/127.0.0.1") {
		t.Errorf("Squid's line for a URL peerd does not hold: %q; want it from Squid's parent", other)
	}
	// peerd logs the queries it answered as Squid does (log_icp_queries).
	hit := regexp.MustCompile(`\d 127\.0\.0\.1 UDP_HIT/000 \d+ ICP_QUERY http://origin\.test/stored - HIER_NONE/- -\n`)
	miss := regexp.MustCompile(`\d 127\.0\.0\.1 UDP_MISS/000 \d+ ICP_QUERY http://origin\.test/not-stored - HIER_NONE/- -\n`)
	waitFor(t, "peerd logging the ICP queries it answered", 5*time.Second, func() bool {
		l := readFile(t, logPath)
		return hit.MatchString(l) && miss.MatchString(l)
	})
	if l := readFile(t, logPath); strings.Contains(l, "GET http://origin.test/not-stored") {
		t.Errorf("peerd was asked to fetch a URL it answered MISS for:\n%s", l)
	}
	if st := p.peer("up"); st.RequestsTotal != 1 {
		t.Errorf("peerd's parent got %d requests; want only the priming one", st.RequestsTotal)
	}
}

// A peerd child has a real Squid sibling (icp_port set) holding X: X is a
// SIBLING_HIT in peerd's log, and the sibling is never asked over HTTP
// for a miss.
func TestICPPeerdAsksSquidSibling(t *testing.T) {
	t.Parallel()
	up := cacheableParent(t, "up")
	sibICP := freeUDPPort(t)
	sib := startSquid(t, "sqsib", squidICP(sibICP)+
		fmt.Sprintf("cache_peer 127.0.0.1 parent %s 0 no-query default name=up\n", up.port())+"never_direct allow all\n")
	if r := do(proxyClientFor(t, sib.addr), "GET", "http://origin.test/x", ""); r.status != 200 {
		t.Fatalf("priming the Squid sibling: %s", r)
	}
	logPath := t.TempDir() + "/access.log"
	icpTable, _ := peerdICP(t)
	p := startPeerd(t, addAccessLog(baseConfig, logPath)+icpTable+
		fmt.Sprintf("[[peer]]\nname = \"sqsib\"\nhost = \"127.0.0.1\"\nport = %s\ntype = \"sibling\"\nicp_port = %s\n", sib.port(), sibICP)+
		peerBlock("", up))
	waitFor(t, "peers alive", 5*time.Second, func() bool { return p.peer("up").State == "alive" && p.peer("sqsib").State == "alive" })
	cl := p.client()
	for _, u := range []string{"http://origin.test/x", "http://origin.test/y", "http://origin.test/z"} {
		if r := do(cl, "GET", u, ""); r.status != 200 {
			t.Fatalf("GET %s: %s", u, r)
		}
	}
	var x string
	waitFor(t, "peerd logging", 5*time.Second, func() bool {
		for _, l := range strings.Split(readFile(t, logPath), "\n") {
			if strings.Contains(l, "origin.test/x ") {
				x = l
			}
		}
		return x != ""
	})
	if !strings.Contains(x, "SIBLING_HIT/127.0.0.1") {
		t.Errorf("peerd's line for X: %q; want SIBLING_HIT", x)
	}
	for _, l := range sib.accessLog() {
		if !strings.Contains(l, "ICP_QUERY") && (strings.Contains(l, "origin.test/y") || strings.Contains(l, "origin.test/z")) {
			t.Errorf("the sibling was asked over HTTP for a miss: %s", l)
		}
	}
	st := p.peer("sqsib")
	var icp struct {
		Queries int `json:"icp_queries"`
		Hits    int `json:"icp_hits"`
		Misses  int `json:"icp_misses"`
	}
	p.adminJSON("GET", "/peers/sqsib", "", &icp)
	if icp.Queries != 3 || icp.Hits != 1 || icp.Misses != 2 {
		t.Errorf("sibling ICP counters %+v; want 3 queries, 1 hit, 2 misses", icp)
	}
	if !strings.Contains(p.adminMetrics(), `peerd_peer_icp_total{kind="hit",peer="sqsib"} 1`) {
		t.Error("/metrics lacks the sibling's ICP hit")
	}
	_ = st
}

// udpRelay forwards datagrams between a client and target, delaying
// each answer by delay (an ICP port on a slow path).
func udpRelay(t *testing.T, target string, delay time.Duration) string {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	up, err := net.Dial("udp", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); up.Close() })
	var mu sync.Mutex
	var client net.Addr
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			mu.Lock()
			client = from
			mu.Unlock()
			up.Write(buf[:n])
		}
	}()
	go func() {
		buf := make([]byte, 65536)
		for {
			n, err := up.Read(buf)
			if err != nil {
				return
			}
			msg := append([]byte(nil), buf[:n]...)
			mu.Lock()
			to := client
			mu.Unlock()
			time.AfterFunc(delay, func() { c.WriteTo(msg, to) })
		}
	}()
	return c.LocalAddr().String()
}

// A parent array of two Squids, one behind a slow path: the first parent
// to answer ICP MISS goes first, so the fast one gets most requests.
func TestICPFirstParentMiss(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "origin") })
	fastICP, slowICP := freeUDPPort(t), freeUDPPort(t)
	fast := startSquid(t, "fast", squidICP(fastICP))
	slow := startSquid(t, "slow", squidICP(slowICP))
	relay := udpRelay(t, "127.0.0.1:"+slowICP, 40*time.Millisecond)
	_, relayPort, _ := net.SplitHostPort(relay)
	logPath := t.TempDir() + "/access.log"
	icpTable, _ := peerdICP(t)
	p := startPeerd(t, addAccessLog(baseConfig, logPath)+icpTable+policy("round-robin")+
		fmt.Sprintf("[[peer]]\nname = \"fast\"\nhost = \"127.0.0.1\"\nport = %s\nicp_port = %s\n", fast.port(), fastICP)+
		fmt.Sprintf("[[peer]]\nname = \"slow\"\nhost = \"127.0.0.1\"\nport = %s\nicp_port = %s\n", slow.port(), relayPort))
	waitFor(t, "parents alive", 5*time.Second, func() bool { return p.peer("fast").State == "alive" && p.peer("slow").State == "alive" })
	cl := p.client()
	byFast, n := 0, 30
	for i := 0; i < n; i++ {
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://%s/o%d", origin, i), nil)
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatalf("GET %d: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %d: %d", i, resp.StatusCode)
		}
		if strings.Contains(strings.Join(resp.Header.Values("Via"), ","), " fast ") {
			byFast++
		}
	}
	if byFast < n*8/10 {
		t.Errorf("the fast parent served %d of %d; FIRST_PARENT_MISS should pick it for most", byFast, n)
	}
	waitFor(t, "the access log", 5*time.Second, func() bool { return strings.Count(readFile(t, logPath), "\n") >= n })
	if c := strings.Count(readFile(t, logPath), "FIRST_PARENT_MISS/127.0.0.1"); c < n*8/10 {
		t.Errorf("%d FIRST_PARENT_MISS lines of %d:\n%s", c, n, readFile(t, logPath))
	}
}

// A sibling whose ICP port goes silent becomes suspect and is probed;
// while its TCP port stays dead it gets no HTTP request.
func TestICPSilentSibling(t *testing.T) {
	t.Parallel()
	up := newFakeParent(t, "up")
	sibICP := freeUDPPort(t)
	sib := startSquid(t, "sqquiet", squidICP(sibICP))
	icpTable, _ := peerdICP(t)
	p := startPeerd(t, baseConfig+icpTable+
		fmt.Sprintf("[[peer]]\nname = \"sq\"\nhost = \"127.0.0.1\"\nport = %s\ntype = \"sibling\"\nicp_port = %s\n", sib.port(), sibICP)+
		peerBlock("", up))
	waitFor(t, "peers alive", 5*time.Second, func() bool { return p.peer("up").State == "alive" && p.peer("sq").State == "alive" })
	cl := p.client()
	if r := do(cl, "GET", "http://origin.test/warm", ""); r.status != 200 {
		t.Fatalf("warm-up: %s", r)
	}
	sib.kill()
	live := func() int { st := p.peer("sq"); return st.ConnectsTotal - st.ProbesTotal }
	before := live()
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; p.peer("sq").State != "dead"; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("the silent sibling is %+v after 20 s; want it found dead by probes", p.peer("sq"))
		}
		if r := do(cl, "GET", fmt.Sprintf("http://origin.test/q%d", i), ""); r.status != 200 || r.from != "up" {
			t.Fatalf("GET %d: %s", i, r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	found := false
	for _, tr := range p.history("sq") {
		if tr.To == "suspect" && strings.Contains(tr.Error, "ICP") {
			found = true
		}
	}
	if !found {
		t.Errorf("history %+v; want the suspicion for ICP silence", p.history("sq"))
	}
	if n := live() - before; n != 0 {
		t.Errorf("%d HTTP connects to the dead sibling", n)
	}
	// The first query after the kill waited out its timeout: the access
	// log says so as Squid's does, with a TIMEOUT_ hierarchy code.
	lines := accessLines(t, p.accessLog, 2)
	if l := nthLine(lines, " http://origin.test/q0 ", 0); !strings.Contains(l, " TIMEOUT_FIRSTUP_PARENT/") {
		t.Errorf("the access log line of the first GET after the kill %q; want TIMEOUT_FIRSTUP_PARENT", l)
	}
}

// proxyClientFor is an HTTP client using addr (a Squid) as its proxy.
func proxyClientFor(t *testing.T, addr string) *http.Client {
	u, _ := url.Parse("http://" + addr)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}, Timeout: 20 * time.Second}
}

// TestICPQueryLogOff: with [icp] log_queries = false the queries peerd
// answers leave no access log line (a busy sibling's log is its own
// requests); with the default they do. A query's line is written before
// its answer is sent, and a request after it is the marker that the log
// has been flushed past it.
func TestICPQueryLogOff(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	for _, on := range []bool{true, false} {
		icpTable, port := peerdICP(t)
		logPath := t.TempDir() + "/access.log"
		p := startPeerd(t, addAccessLog(directConfig, logPath)+icpTable+fmt.Sprintf("log_queries = %v\n", on))
		c, err := net.Dial("udp", "127.0.0.2:"+port)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write((&icp.Message{Op: icp.OpQuery, ReqNum: 7, URL: []byte("http://origin.test/asked")}).Append(nil))
		if _, err := c.Read(make([]byte, icp.MaxLen)); err != nil {
			t.Fatalf("no ICP answer: %v", err)
		}
		mark := fmt.Sprintf("http://%s/marker", origin)
		if r := do(p.client(), "GET", mark, ""); r.status != 200 {
			t.Fatalf("marker: %s", r)
		}
		waitFor(t, "the marker logged", 5*time.Second, func() bool { return strings.Contains(readFile(t, logPath), mark) })
		if logged := strings.Contains(readFile(t, logPath), "ICP_QUERY http://origin.test/asked"); logged != on {
			t.Errorf("log_queries = %v: the query answered is logged: %v\n%s", on, logged, readFile(t, logPath))
		}
	}
}
