package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The cache through the binary: collapsed forwarding, stale answers when
// every parent is dead, and peerd as another peerd's sibling.

// cacheStats is GET /cache.
type cacheStats struct {
	Objects     int     `json:"objects"`
	Bytes       int64   `json:"bytes"`
	Memory      int64   `json:"memory"`
	Hits        int64   `json:"hits"`
	Misses      int64   `json:"misses"`
	HitRatio    float64 `json:"hit_ratio"`
	Collapsed   int64   `json:"collapsed"`
	StaleServed int64   `json:"stale_served"`
	// The disk tier (contract section 17).
	DiskObjects  int64 `json:"disk_objects"`
	DiskBytes    int64 `json:"disk_bytes"`
	DiskErrors   int64 `json:"disk_errors"`
	DiskHits     int64 `json:"disk_hits"`
	IndexLoading bool  `json:"index_loading"`
}

func (p *peerd) cacheStats() cacheStats {
	p.t.Helper()
	var s cacheStats
	p.adminJSON("GET", "/cache", "", &s)
	return s
}

func withAccessLog(t *testing.T, cfg string) (string, string) {
	log := t.TempDir() + "/access.log"
	return strings.Replace(cfg, "[log]\n", fmt.Sprintf("[log]\naccess_log = %q\n", log), 1), log
}

// accessLines waits for n lines in the access log and returns them.
func accessLines(t *testing.T, path string, n int) []string {
	t.Helper()
	var lines []string
	waitFor(t, fmt.Sprintf("%d access log lines", n), 5*time.Second, func() bool {
		b, _ := os.ReadFile(path)
		lines = strings.Split(strings.TrimSpace(string(b)), "\n")
		return len(b) > 0 && len(lines) >= n
	})
	return lines
}

func countContaining(lines []string, s string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// TestCollapsedForwarding: 100 concurrent clients on a cold URL cause
// exactly one parent request, and all get its answer; an uncacheable URL
// is not collapsed again once its answer was seen.
func TestCollapsedForwarding(t *testing.T) {
	t.Parallel()
	a := newFakeParent(t, "a")
	a.SetHeader("Cache-Control", "max-age=60")
	cfg, log := withAccessLog(t, baseConfig+peerBlock("", a))
	p := startPeerd(t, cfg)
	c := p.client()
	const clients = 100
	var wg sync.WaitGroup
	bodies := make([]string, clients)
	errs := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("GET", "http://origin.test/cold", nil)
			req.Header.Set("X-Delay", "300ms")
			resp, err := c.Do(req)
			if err != nil {
				errs <- err
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				errs <- fmt.Errorf("status %d: %s", resp.StatusCode, b)
			}
			bodies[i] = string(b)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := a.requests("GET"); n != 1 {
		t.Fatalf("parent got %d requests for 100 concurrent clients; want exactly 1", n)
	}
	for i, b := range bodies {
		if b != bodies[0] || !strings.Contains(b, "from a: GET http://origin.test/cold") {
			t.Fatalf("client %d got %q, client 0 %q", i, b, bodies[0])
		}
	}
	lines := accessLines(t, log, clients)
	if miss, hit := countContaining(lines, "TCP_MISS/200"), countContaining(lines, "TCP_MEM_HIT/200"); miss != 1 || hit != clients-1 {
		t.Fatalf("access log: %d TCP_MISS, %d TCP_MEM_HIT; want 1 and %d", miss, hit, clients-1)
	}
	if st := p.cacheStats(); st.Collapsed != clients-1 || st.Objects != 1 {
		t.Fatalf("GET /cache = %+v; want %d collapsed and 1 object", st, clients-1)
	}

	// Uncacheable: the waiting requests go on their own, and later ones
	// do not wait at all (hit-for-miss).
	a.SetHeader("Cache-Control", "no-store")
	before := a.requests("GET")
	var wg2 sync.WaitGroup
	for range 10 {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			req, _ := http.NewRequest("GET", "http://origin.test/private", nil)
			req.Header.Set("X-Delay", "100ms")
			if resp, err := c.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg2.Wait()
	if n := a.requests("GET") - before; n != 10 {
		t.Fatalf("uncacheable URL: parent got %d requests for 10 clients; want 10 (each forwarded)", n)
	}
}

// TestStaleWhenParentsDead: with every parent dead a stale response is
// served (Cache-Status, Proxy-Status, TCP_REFRESH_FAIL_OLD); one with
// must-revalidate is answered 504.
func TestStaleWhenParentsDead(t *testing.T) {
	t.Parallel()
	a := newFakeParent(t, "a")
	a.SetHeader("Cache-Control", "max-age=1")
	cfg, log := withAccessLog(t, baseConfig+health(1, "1h", "1h")+peerBlock("", a))
	p := startPeerd(t, cfg)
	c := p.client()
	get := func(u string) (*http.Response, string) {
		t.Helper()
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	_, plain := get("http://origin.test/plain")
	a.SetHeader("Cache-Control", "max-age=1, must-revalidate")
	get("http://origin.test/strict")
	time.Sleep(2100 * time.Millisecond) // both stale now
	a.stop()
	waitFor(t, "a dead", 10*time.Second, func() bool {
		c.Get("http://origin.test/kill-it") // a connect failure: connect_fail_limit = 1
		return p.peer("a").State == "dead"
	})

	resp, body := get("http://origin.test/plain")
	if resp.StatusCode != 200 || body != plain {
		t.Fatalf("with every parent dead: %d %q; want the stale 200 %q", resp.StatusCode, body, plain)
	}
	if cs := resp.Header.Get("Cache-Status"); !strings.Contains(cs, "fwd=stale") {
		t.Errorf("Cache-Status %q; want fwd=stale", cs)
	}
	if ps := resp.Header.Get("Proxy-Status"); !strings.Contains(ps, "error=destination_unavailable") {
		t.Errorf("Proxy-Status %q; want error=destination_unavailable", ps)
	}
	if resp, _ := get("http://origin.test/strict"); resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("must-revalidate with every parent dead: %d; want 504", resp.StatusCode)
	}
	lines := accessLines(t, log, 4)
	if countContaining(lines, "TCP_REFRESH_FAIL_OLD/200") != 1 {
		t.Fatalf("access log lacks TCP_REFRESH_FAIL_OLD/200:\n%s", strings.Join(lines, "\n"))
	}
	if st := p.cacheStats(); st.StaleServed != 1 {
		t.Fatalf("GET /cache stale_served = %d; want 1", st.StaleServed)
	}
}

// peerdPeer makes a running peerd a [[peer]] of another.
type peerdPeer struct {
	name string
	p    *peerd
}

func (s peerdPeer) peerName() string { return s.name }
func (s peerdPeer) port() string     { _, port, _ := net.SplitHostPort(s.p.proxy); return port }

// TestPeerdSiblingHit: a child peerd asks a sibling peerd with
// only-if-cached; what the sibling stores is answered by it (SIBLING_HIT
// in the child's log), and a miss goes to the parent without the sibling
// fetching anything.
func TestPeerdSiblingHit(t *testing.T) {
	a := newFakeParent(t, "a")
	a.SetHeader("Cache-Control", "max-age=600")
	// Named apart: peers that share a name see each other's Via as a loop.
	sib := startPeerd(t, strings.Replace(baseConfig, `name = "peerd"`, `name = "sib"`, 1)+peerBlock("", a))
	cfg, log := withAccessLog(t, baseConfig+peerBlock(`type = "sibling"`, peerdPeer{"sib", sib})+peerBlock("", a))
	child := startPeerd(t, cfg)

	// The sibling stores /warm.
	if resp, err := sib.client().Get("http://origin.test/warm"); err != nil {
		t.Fatal(err)
	} else {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	parentBefore := a.requests("GET")

	for _, path := range []string{"/warm", "/cold"} {
		resp, err := child.client().Get("http://origin.test" + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "from a: GET http://origin.test"+path) {
			t.Fatalf("%s via the child: %d %q", path, resp.StatusCode, b)
		}
	}
	lines := accessLines(t, log, 2)
	if !strings.Contains(lines[0], "SIBLING_HIT/") || !strings.Contains(lines[0], "/warm") {
		t.Fatalf("the child's log for /warm: %q; want SIBLING_HIT", lines[0])
	}
	if strings.Contains(lines[1], "SIBLING_HIT") {
		t.Fatalf("the child's log for /cold: %q; want the parent", lines[1])
	}
	// Only the child's /cold reached the parent: the sibling fetched
	// nothing for its miss.
	if n := a.requests("GET") - parentBefore; n != 1 {
		t.Fatalf("parent got %d requests after warming; want 1 (the child's miss)", n)
	}
}

// TestRefreshIMS: with refresh_ims (Squid refresh-ims), a client's
// If-Modified-Since for a fresh stored Release file is checked with the
// origin; a plain request is still a hit.
func TestRefreshIMS(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT")
		if r.Header.Get("If-Modified-Since") != "" {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Write([]byte("Release"))
	})
	p := startPeerd(t, directConfig+"[cache]\nrefresh_patterns = [{ pattern = \"/Release$\", min = \"0s\", percent = 0, max = \"0s\", refresh_ims = true }]\n")
	c := p.client()
	get := func(ims bool) int {
		req, _ := http.NewRequest("GET", "http://"+origin+"/dists/Release", nil)
		if ims {
			req.Header.Set("If-Modified-Since", "Mon, 01 Jan 2024 00:00:00 GMT")
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	get(false)
	if st := get(true); st != http.StatusNotModified || n.Load() != 2 {
		t.Fatalf("If-Modified-Since with refresh_ims: %d, origin saw %d requests; want 304 after asking it", st, n.Load())
	}
	if st := get(false); st != 200 || n.Load() != 2 {
		t.Fatalf("a plain request: %d, origin saw %d; want a hit", st, n.Load())
	}
}

// TestCollapsedLeaderFails: the leader of 20 collapsed requests gets a
// 503; one of the followers becomes the leader and the others wait for
// it, so the origin sees two requests, not twenty (a failing next hop is
// not stormed by the requests that were waiting on it).
func TestCollapsedLeaderFails(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond) // the followers join meanwhile
		if n.Add(1) == 1 {
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Cache-Control", "max-age=60")
		io.WriteString(w, "the object")
	})
	p := startPeerd(t, directConfig)
	c := p.client()
	var wg sync.WaitGroup
	codes := make(chan int, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Get("http://" + origin + "/leader-fails")
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	wg.Wait()
	close(codes)
	ok := 0
	for code := range codes {
		if code == 200 {
			ok++
		}
	}
	if got := n.Load(); got != 2 || ok != 19 {
		t.Fatalf("origin asked %d times, %d clients got the object; want 2 and 19 (one 503 for the first leader)", got, ok)
	}
}
