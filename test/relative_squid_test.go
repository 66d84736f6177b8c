package e2e

// Parents judged against each other with real Squid parents (issue 43):
// one Squid reaches the origin only through a slow hop of its own and
// loses its share; an origin slow behind every Squid alike moves nothing.

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// slowHop is a forward proxy that waits delay before it forwards each
// request: the slow path one Squid parent alone takes to the origin.
type slowHop struct {
	delay atomic.Int64 // ns
	addr  string
}

func newSlowHop(t *testing.T) *slowHop {
	h := &slowHop{}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Duration(h.delay.Load())) // the hop's own slowness, under test
		out, _ := http.NewRequest(r.Method, r.RequestURI, nil)
		out.Header = r.Header.Clone()
		resp, err := tr.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	h.addr = ln.Addr().String()
	return h
}

func (h *slowHop) port() string { _, p, _ := net.SplitHostPort(h.addr); return p }

func TestSquidSlowerParentLosesShare(t *testing.T) {
	var originDelay atomic.Int64 // ns, on every request: an origin slow behind every parent
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Duration(originDelay.Load()))
		w.Header().Set("Cache-Control", "no-store")
		fmt.Fprintf(w, "origin %s", r.URL.Path)
	})
	hop := newSlowHop(t)
	s1 := startSquid(t, "squid1", fmt.Sprintf("cache_peer 127.0.0.1 parent %s 0 no-query no-digest name=hop\nnever_direct allow all\n", hop.port()))
	s2 := startSquid(t, "squid2", "")
	s3 := startSquid(t, "squid3", "")
	cfg := withProxy(baseConfig, `read_timeout = "10s"`) + grayConfig + policy("round-robin") + peerBlock("", s1, s2, s3)
	p := startPeerd(t, cfg)
	names := []string{"squid1", "squid2", "squid3"}
	// sharesOver runs 40 GET/s for d and returns each Squid's part of the
	// requests peerd sent.
	sharesOver := func(d time.Duration) (map[string]float64, loadResult) {
		before := map[string]int{}
		for _, n := range names {
			before[n] = p.peer(n).RequestsTotal
		}
		r := pacedTo(p, origin, 40, d, 0, 0)
		got, total := map[string]int{}, 0
		for _, n := range names {
			got[n] = p.peer(n).RequestsTotal - before[n]
			total += got[n]
		}
		out := map[string]float64{}
		for _, n := range names {
			out[n] = float64(got[n]) / float64(max(total, 1))
		}
		return out, r
	}
	if _, r := sharesOver(1500 * time.Millisecond); r.errs != 0 {
		t.Fatalf("warm-up: %d errors (%s)", r.errs, r.firstErr)
	}

	// squid1's own way to the origin is 60 ms slower than its siblings'.
	hop.delay.Store(int64(60 * time.Millisecond))
	if _, r := sharesOver(7 * time.Second); r.errs != 0 {
		t.Errorf("slow, first 7s: %d client errors (first: %s)", r.errs, r.firstErr)
	}
	sh, r := sharesOver(7 * time.Second)
	if r.errs != 0 {
		t.Errorf("slow: %d client errors (first: %s)", r.errs, r.firstErr)
	}
	t.Logf("slow squid1: shares %v, squid1 %+v", sh, p.rel("squid1"))
	if sh["squid1"] > 0.10 {
		t.Errorf("the slower Squid kept %.1f%% of the requests; want at most 10%%", 100*sh["squid1"])
	}

	// Its hop is fast again; the origin is slow behind every Squid alike.
	hop.delay.Store(0)
	waitFor(t, "squid1 no longer suspect", 15*time.Second, func() bool { return !p.rel("squid1").Suspect })
	originDelay.Store(int64(40 * time.Millisecond))
	if _, r := sharesOver(7 * time.Second); r.errs != 0 {
		t.Errorf("control, first 7s: %d client errors (first: %s)", r.errs, r.firstErr)
	}
	sh, r = sharesOver(7 * time.Second)
	if r.errs != 0 {
		t.Errorf("control: %d client errors (first: %s)", r.errs, r.firstErr)
	}
	t.Logf("slow origin behind every Squid: shares %v", sh)
	for _, n := range names {
		st := p.rel(n)
		if sh[n] < 0.22 || sh[n] > 0.45 || st.State != "alive" || st.Outlier {
			t.Errorf("%s: %.1f%% of the requests, %+v; a slow origin everywhere moves nothing (want 22-45%%, alive, no outlier)", n, 100*sh[n], st)
		}
	}
}
