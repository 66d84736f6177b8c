package e2e

// Health beyond the parent's door (issue 63), through the binary: real
// Squid parents one of which cannot reach one origin, and a hierarchy of
// peerds one of which loses its own parent.

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// squidWithHosts starts a real Squid parent that resolves names from a
// hosts file of its own (name → address).
func squidWithHosts(t *testing.T, name string, hosts map[string]string) *squid {
	t.Helper()
	var b strings.Builder
	for n, a := range hosts {
		fmt.Fprintf(&b, "%s %s\n", a, n)
	}
	dir, err := os.MkdirTemp("", "peerd-hosts-") // Squid reads it as its own user
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	f := filepath.Join(dir, name+".hosts")
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return startSquid(t, name, "hosts_file "+f+"\nconnect_retries 0\nforward_max_tries 1\n")
}

// countIn counts the lines of a Squid access log that ask for host.
func countIn(lines []string, host string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, "http://"+host+":") {
			n++
		}
	}
	return n
}

// TestSquidParentCannotReachOneOrigin: of three real Squid parents under
// round-robin, squid1 cannot reach bad.test (its connect there is
// refused: 503 ERR_CONNECT_FAIL). Of 150 requests for bad.test at most
// two fail and squid1 gets at most three of them after the first ten;
// no request for good.test fails, and squid1 keeps its third of those.
// Once its way to bad.test returns, it carries bad.test again within
// 10 s, found by peerd's probe through it (no live request sent to see).
func TestSquidParentCannotReachOneOrigin(t *testing.T) {
	requireSquid(t)
	var mu sync.Mutex
	hits := 0
	handler := func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
		w.Header().Set("Cache-Control", "no-store")
		io.WriteString(w, "origin "+r.Host)
	}
	origin := newOrigin(t, handler)
	_, port, _ := net.SplitHostPort(origin)
	s1 := squidWithHosts(t, "squid1", map[string]string{"bad.test": "127.0.0.2", "good.test": "127.0.0.1"})
	s2 := squidWithHosts(t, "squid2", map[string]string{"bad.test": "127.0.0.1", "good.test": "127.0.0.1"})
	s3 := squidWithHosts(t, "squid3", map[string]string{"bad.test": "127.0.0.1", "good.test": "127.0.0.1"})
	p := startPeerd(t, baseConfig+policy("round-robin")+health(3, "1s", "2s")+peerBlock("", s1, s2, s3))
	c := p.client()
	get := func(host string, i int) bool {
		resp, err := c.Get(fmt.Sprintf("http://%s:%s/%d", host, port, i))
		if err != nil {
			return false
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	failed := map[string]int{}
	var afterTen []string
	for i := 0; i < 150; i++ {
		for _, host := range []string{"bad.test", "good.test"} {
			if !get(host, i) {
				failed[host]++
			}
		}
		if i == 9 {
			afterTen = s1.flushed()
		}
	}
	s1Lines := s1.flushed()
	if failed["bad.test"] > 2 || failed["good.test"] != 0 {
		t.Fatalf("failed: %d of 150 for bad.test, %d for good.test; want at most 2 and 0", failed["bad.test"], failed["good.test"])
	}
	if n := countIn(s1Lines, "bad.test") - countIn(afterTen, "bad.test"); n > 3 {
		t.Fatalf("squid1 got %d requests for bad.test after the first ten; want at most 3", n)
	}
	if n := countIn(s1Lines, "good.test"); n < 150/3-10 || n > 150/3+10 {
		t.Fatalf("squid1 got %d of 150 requests for good.test; want its third", n)
	}
	var st struct {
		State       string `json:"state"`
		Suspect     bool   `json:"suspect"`
		Unreachable []struct {
			Destination string `json:"destination"`
			Cause       string `json:"cause"`
		} `json:"unreachable"`
	}
	p.adminJSON("GET", "/peers/squid1", "", &st)
	if st.State != "alive" || st.Suspect || len(st.Unreachable) != 1 || st.Unreachable[0].Destination != "bad.test" {
		t.Fatalf("squid1 in /peers: %+v; want alive, not suspect, unable to reach bad.test", st)
	}

	// Its way to bad.test returns: the origin answers at 127.0.0.2 too.
	ln, err := net.Listen("tcp", "127.0.0.2:"+port)
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(handler)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	back := time.Now()
	waitFor(t, "peerd to find bad.test through squid1 again", 10*time.Second, func() bool {
		p.adminJSON("GET", "/peers/squid1", "", &st)
		return len(st.Unreachable) == 0
	})
	took := time.Since(back)
	before := countIn(s1.flushed(), "bad.test")
	for i := 0; i < 6; i++ {
		if !get("bad.test", 1000+i) {
			t.Fatalf("a request for bad.test failed once every parent reaches it")
		}
	}
	if n := countIn(s1.flushed(), "bad.test") - before; n < 1 {
		t.Fatalf("squid1 carried %d of 6 requests for bad.test %v after its way returned; want its share", n, took)
	}
	t.Logf("squid1 reaches bad.test again %v after its way returned", took.Round(time.Millisecond))
}

// TestHierarchyParentWithoutNextHop: a child peerd with two peerd
// parents (round-robin, direct never). p1's only next hop is dead, so it
// answers no-peers and says it has no usable next hop: of 100 requests
// through the child at most one fails, and p1 gets at most two after its
// first such answer. Once p1 has its own parent back, the child sends to
// it again within 2 s, with no request of its own to find out.
func TestHierarchyParentWithoutNextHop(t *testing.T) {
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		io.WriteString(w, "origin")
	})
	upPort := freePort(t) // p1's own parent: nothing listens yet
	probes := health(1, "200ms", "500ms")
	local := func(cfg string) string {
		return strings.Replace(cfg, "[access]\n", "[access]\ndeny_to_local = false\n", 1)
	}
	named := func(n string) string { return strings.Replace(baseConfig, `name = "peerd"`, `name = "`+n+`"`, 1) }
	p1 := startPeerd(t, local(named("p1"))+probes+fmt.Sprintf("[[peer]]\nname = \"up\"\nhost = \"127.0.0.1\"\nport = %s\n", upPort))
	p2 := startPeerd(t, local(strings.Replace(named("p2"), `direct = "never"`, `direct = "allow"`, 1)))
	p1Port, p2Port := p1.proxy[strings.LastIndexByte(p1.proxy, ':')+1:], p2.proxy[strings.LastIndexByte(p2.proxy, ':')+1:]
	child := startPeerd(t, named("child")+policy("round-robin")+health(3, "1s", "2s")+
		fmt.Sprintf("[[peer]]\nname = \"p1\"\nhost = \"127.0.0.1\"\nport = %s\n[[peer]]\nname = \"p2\"\nhost = \"127.0.0.1\"\nport = %s\n", p1Port, p2Port))
	c := child.client()
	failed := 0
	for i := 0; i < 100; i++ {
		resp, err := c.Get(fmt.Sprintf("http://%s/%d", origin, i))
		if err != nil {
			failed++
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			failed++
		}
	}
	if failed > 1 {
		t.Fatalf("%d of 100 requests failed through the child; want at most 1", failed)
	}
	var st struct {
		RequestsTotal int  `json:"requests_total"`
		NoNextHop     bool `json:"no_next_hop"`
		Suspect       bool `json:"suspect"`
		State         string
	}
	child.adminJSON("GET", "/peers/p1", "", &st)
	if st.RequestsTotal > 3 || !st.NoNextHop || st.Suspect || st.State != "alive" {
		t.Fatalf("p1 in the child's /peers: %+v; want at most 3 requests (its first no-peers and two more), cut off, alive, not suspect", st)
	}

	// p1's own parent returns.
	ln, err := net.Listen("tcp", "127.0.0.1:"+upPort)
	if err != nil {
		t.Fatal(err)
	}
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "through up") })}
	go up.Serve(ln)
	t.Cleanup(func() { up.Close() })
	var upSt peerStatus
	waitFor(t, "p1 to find its parent alive", 10*time.Second, func() bool {
		upSt = p1.peer("up")
		return upSt.State == "alive"
	})
	back := time.Now()
	waitFor(t, "the child to send to p1 again", 5*time.Second, func() bool {
		child.adminJSON("GET", "/peers/p1", "", &st)
		return !st.NoNextHop
	})
	if took := time.Since(back); took > 2*time.Second {
		t.Fatalf("the child took %v to put p1 back after p1's parent returned; want at most 2s", took)
	}
	before := st.RequestsTotal
	for i := 0; i < 10; i++ {
		resp, err := c.Get(fmt.Sprintf("http://%s/again/%d", origin, i))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("after the return: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	child.adminJSON("GET", "/peers/p1", "", &st)
	if st.RequestsTotal-before < 3 {
		t.Fatalf("p1 got %d of 10 requests after its return; want its share", st.RequestsTotal-before)
	}
}
