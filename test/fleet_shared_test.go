package e2e

// The fleet as one cache through the binary (issue 44, contract section
// 20): three members with shared_cache and one counting parent. Each URL
// has one owner, so the fleet fetches it from the parent once, however
// many members are asked, at once or in turn; the access log says
// FLEET_HIT or FLEET_MISS; a purge on one member makes the next GET
// anywhere fetch once; a fourth member takes only its own share of the
// URLs; a member killed under traffic costs no client an error.

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// sharedFleet starts members a, b, c sharing their caches in front of p1.
func sharedFleet(t *testing.T, p1 *fakeParent) []*peerd {
	return startFleet(t, func(string) string { return sharedRest(p1) })
}

func sharedRest(p1 *fakeParent) string {
	return "shared_cache = true\n" + fleetHealth + peerBlock("", p1)
}

// ownerOf is the owner /plan names for u on m.
func ownerOf(m *peerd, u string) string {
	var e struct {
		Owner *string `json:"owner"`
	}
	m.adminJSON("GET", "/plan?url="+url.QueryEscape(u), "", &e)
	if e.Owner == nil {
		return ""
	}
	return *e.Owner
}

// waitForOwners waits until every member names the same owner for each of
// 30 URLs, and every member owns some; past the deadline it says what
// each member publishes and sees.
func waitForOwners(t *testing.T, ms []*peerd) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		owners, split := map[string]bool{}, ""
		for i := 0; i < 30; i++ {
			u := fmt.Sprintf("http://origin.test/agree/%d", i)
			o := []string{ownerOf(ms[0], u), ownerOf(ms[1], u), ownerOf(ms[2], u)}
			if o[0] == "" || o[1] != o[0] || o[2] != o[0] {
				split = fmt.Sprintf("%s: owner %q at a, %q at b, %q at c", u, o[0], o[1], o[2])
				break
			}
			owners[o[0]] = true
		}
		if split == "" && len(owners) == 3 {
			return
		}
		if time.Now().After(deadline) {
			var views []string
			for _, m := range ms {
				var st struct {
					Node    string           `json:"node"`
					Members []map[string]any `json:"members"`
				}
				m.adminJSON("GET", "/fleet", "", &st)
				views = append(views, fmt.Sprintf("%s sees %v", st.Node, st.Members))
			}
			t.Fatalf("the members do not agree on the owners after 20s (%s; owners %v)\n%s", split, owners, strings.Join(views, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestFleetSharedCache(t *testing.T) {
	p1 := newFakeParent(t, "p1")
	p1.SetHeader("Cache-Control", "max-age=600")
	ms := sharedFleet(t, p1)
	waitForOwners(t, ms)

	t.Run("one fetch", func(t *testing.T) {
		before := p1.requests("GET")
		// A client each, kept: its connection is reused, as a browser's
		// would be (a new client a request leaves one more idle
		// connection open each time, and max_connections_per_source
		// closes the 1,025th).
		clients := make([]*http.Client, len(ms))
		for k, m := range ms {
			clients[k] = m.client()
		}
		for i := 0; i < 150; i++ {
			for k := range ms {
				u := fmt.Sprintf("http://origin.test/shared/%d", i)
				if r := do(clients[k], "GET", u, ""); r.status != 200 {
					t.Fatalf("GET %s through member %d: %s", u, k, r)
				}
			}
		}
		if n := p1.requests("GET") - before; n != 150 {
			t.Fatalf("150 URLs through three members: %d parent fetches; want 150", n)
		}
		owners := map[string]int{}
		for i := 0; i < 150; i++ {
			owners[ownerOf(ms[i%3], fmt.Sprintf("http://origin.test/shared/%d", i))]++
		}
		if len(owners) != 3 || owners[""] != 0 {
			t.Fatalf("owners of the 150 URLs: %v; want the three members", owners)
		}
		var logs strings.Builder
		waitFor(t, "FLEET_HIT and FLEET_MISS in the access logs", 10*time.Second, func() bool {
			logs.Reset()
			for _, m := range ms {
				b, _ := os.ReadFile(m.accessLog)
				logs.Write(b)
			}
			return strings.Contains(logs.String(), " FLEET_HIT/") && strings.Contains(logs.String(), " FLEET_MISS/")
		})
	})

	t.Run("status page", func(t *testing.T) {
		resp, err := http.Get("http://" + ms[0].admin + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		page := string(b)
		for _, want := range []string{"<h2>Fleet</h2>", "3 members", "owner share a ", "b ", "c ", "hit", "answered as owner"} {
			if !strings.Contains(page, want) {
				t.Fatalf("the status page has no %q in its fleet section", want)
			}
		}
	})

	t.Run("trust", func(t *testing.T) {
		// A request that claims to come from a member but is not signed
		// by one is refused, and nothing reaches the parent.
		before := p1.requests("GET")
		req, _ := http.NewRequest("GET", "http://origin.test/trust/forged", nil)
		req.Header.Set("Peerd-Fleet-Member", fmt.Sprintf("b %d AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", time.Now().UnixMilli()))
		resp, err := ms[0].client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || p1.requests("GET") != before {
			t.Fatalf("a forged member request: %d, %d parent fetches; want 403 and none", resp.StatusCode, p1.requests("GET")-before)
		}
	})

	t.Run("collapse", func(t *testing.T) {
		before := p1.requests("GET")
		p1.setMode("delay:500ms") // the one fetch is in flight while the others arrive
		defer p1.setMode("")
		var wg sync.WaitGroup
		var errs atomic.Int64
		for i := 0; i < 24; i++ {
			wg.Add(1)
			go func(m *peerd) {
				defer wg.Done()
				if r := do(m.client(), "GET", "http://origin.test/collapse/new", ""); r.status != 200 {
					errs.Add(1)
				}
			}(ms[i%3])
		}
		wg.Wait()
		if n := p1.requests("GET") - before; n != 1 || errs.Load() != 0 {
			t.Fatalf("24 concurrent requests over three members: %d parent fetches, %d errors; want 1 and 0", n, errs.Load())
		}
	})

	t.Run("purge", func(t *testing.T) {
		const u = "http://origin.test/shared/7"
		var out struct {
			Acknowledged []string `json:"acknowledged"`
		}
		ms[0].adminJSON("DELETE", "/cache?url="+url.QueryEscape(u), "secret", &out)
		if len(out.Acknowledged) != 2 {
			t.Fatalf("purge acknowledged by %v; want b and c", out.Acknowledged)
		}
		before := p1.requests("GET")
		for _, m := range ms {
			do(m.client(), "GET", u, "")
		}
		if n := p1.requests("GET") - before; n != 1 {
			t.Fatalf("after a purge on a: %d parent fetches through the three members; want 1", n)
		}
	})

	t.Run("churn", func(t *testing.T) {
		urls := make([]string, 2000)
		before := make([]string, len(urls))
		for i := range urls {
			urls[i] = fmt.Sprintf("http://origin.test/churn/%d", i)
			before[i] = ownerOf(ms[0], urls[i])
		}
		d := startPeerd(t, fleetConfig("d", fleetKey, []string{ms[0].gossipAddr()}, sharedRest(p1)))
		waitFor(t, "d owning URLs", 10*time.Second, func() bool {
			for _, u := range urls[:50] {
				if ownerOf(ms[0], u) == "d" {
					return true
				}
			}
			return false
		})
		moved := 0
		for i, u := range urls {
			if o := ownerOf(ms[0], u); o != before[i] {
				moved++
				if o != "d" {
					t.Fatalf("%s moved from %s to %s when d joined; want only to d", u, before[i], o)
				}
			}
		}
		if f := float64(moved) / float64(len(urls)); f > 0.27 {
			t.Fatalf("d's join moved %.1f%% of 2000 URLs; want at most 27%%", 100*f)
		}
		t.Logf("d's join moved %d of 2000 URLs", moved)
		d.Stop()
	})

	t.Run("death", func(t *testing.T) {
		var wg sync.WaitGroup
		var errs, n atomic.Int64
		var first atomic.Value
		stop := make(chan struct{})
		for k := 0; k < 2; k++ {
			wg.Add(1)
			go func(m *peerd) {
				defer wg.Done()
				cl := m.client() // one kept: see "one fetch"
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					r := do(cl, "GET", fmt.Sprintf("http://origin.test/death/%d/%d", time.Now().UnixNano(), i), "")
					n.Add(1)
					if r.status != 200 {
						errs.Add(1)
						first.CompareAndSwap(nil, fmt.Sprintf("%v, %v", r, r.err))
					}
					time.Sleep(5 * time.Millisecond)
				}
			}(ms[k])
		}
		time.Sleep(500 * time.Millisecond) // traffic through a and b before c dies
		ms[2].Signal(syscall.SIGKILL)
		// memberlist declares c dead when its suspicion times out: 3 s
		// with another member's confirmation, up to 18 s without one
		// (loopback settings: SuspicionMult 3, SuspicionMaxTimeoutMult
		// 6, ProbeInterval 1 s). A confirmation lost under load (seen:
		// b marked c dead at 5 s, a never heard b's gossip) leaves a on
		// the long timer.
		waitFor(t, "c gone from a's view", 30*time.Second, func() bool {
			return ownerOf(ms[0], "http://origin.test/death/x") != "" && len(ms[0].fleet().Members) == 2
		})
		time.Sleep(500 * time.Millisecond) // and traffic after
		close(stop)
		wg.Wait()
		if errs.Load() != 0 {
			t.Fatalf("%d client errors of %d requests when c was killed (first: %v)", errs.Load(), n.Load(), first.Load())
		}
		t.Logf("%d requests through a and b while c was killed, 0 errors", n.Load())
	})
}
