package forwarding

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/peerd/peerd/cache"
	"github.com/peerd/peerd/dialer"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
	"github.com/sirupsen/logrus"
)

// Keep-alive GETs through peerd to a loopback parent, against the same
// client talking to the parent directly, in one run: compare ns/op of the
// two (peerd/direct) and read allocs/op for the cost per proxied request.

var body1k = strings.Repeat("x", 1024)

func benchParent(b *testing.B) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body1k)))
		io.WriteString(w, body1k)
	}))
}

func benchClient(proxy string) *http.Client {
	u, _ := url.Parse(proxy)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), MaxIdleConnsPerHost: 64, DisableCompression: true}}
}

func runGets(b *testing.B, c *http.Client) {
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Get("http://origin.test/obj")
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatal(resp.Status)
			}
		}
	})
}

func BenchmarkDirectToParent(b *testing.B) {
	parent := benchParent(b)
	defer parent.Close()
	runGets(b, benchClient(parent.URL))
}

// startBenchProxy runs peerd's engine on loopback with one parent.
func startBenchProxy(b testing.TB, parentAddr string) string {
	return startBenchProxyCache(b, parentAddr, nil)
}

// startBenchProxyCache is startBenchProxy with a cache (nil: off).
func startBenchProxyCache(b testing.TB, parentAddr string, ch *cache.Cache) string {
	addr, _ := startBenchProxyCacheP(b, parentAddr, ch)
	return addr
}

func startBenchProxyCacheP(b testing.TB, parentAddr string, ch *cache.Cache) (string, *Proxy) {
	log := logrus.New()
	log.SetLevel(logrus.ErrorLevel)
	host, portStr, _ := net.SplitHostPort(parentAddr)
	port, _ := strconv.Atoi(portStr)
	reg, _ := peers.New(peers.Options{Health: peers.DefaultConfig(), ConnectTimeout: time.Second, Log: log},
		[]peers.Spec{{Name: "p", Host: host, Port: port}})
	reg.Observe(reg.Get("p"), peers.Outcome{At: time.Now(), Probe: true})
	cfg := DefaultConfig()
	// The access log is on: formatting a line is part of a request's cost.
	al, err := OpenAccessLog(filepath.Join(b.TempDir(), "access.log"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { al.Close() })
	px, err := New(Options{Config: cfg, Planner: selection.New(reg, selection.Options{}), Accounting: reg,
		Dialer: &dialer.Dialer{Reporter: reg, Log: log}, Log: log, AccessLog: al})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	px.SetCache(ch)
	go px.Serve(ln)
	b.Cleanup(func() { ln.Close(); px.CloseIdle() })
	return ln.Addr().String(), px
}

func BenchmarkViaPeerd(b *testing.B) {
	parent := benchParent(b)
	defer parent.Close()
	u, _ := url.Parse(parent.URL)
	runGets(b, benchClient("http://"+startBenchProxy(b, u.Host)))
}

// rawParent answers every request head on a connection with a fixed 1 KiB
// response, allocating nothing per request, so that a benchmark's
// allocs/op are the proxy's own.
func rawParent(b testing.TB) string { return rawParentWith(b, "") }

// rawParentWith is rawParent with extra response fields (each ending
// "\r\n").
func rawParentWith(b testing.TB, fields string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n" + fields + "Content-Length: 1024\r\n\r\n" + body1k)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 8192)
				n := 0
				for {
					m, err := c.Read(buf[n:])
					if err != nil {
						return
					}
					n += m
					for {
						i := bytes.Index(buf[:n], []byte("\r\n\r\n"))
						if i < 0 {
							break
						}
						if _, err := c.Write(resp); err != nil {
							return
						}
						n = copy(buf, buf[i+4:n])
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// rawClient sends keep-alive GETs on one connection and reads each
// answer by its Content-Length, allocating nothing per request.
type rawClient struct {
	tb   testing.TB
	c    net.Conn
	buf  []byte
	have int
}

var rawRequest = []byte("GET http://origin.test/obj HTTP/1.1\r\nHost: origin.test\r\nUser-Agent: bench\r\n\r\n")

func newRawClient(tb testing.TB, proxy string) *rawClient {
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		tb.Fatal(err)
	}
	return &rawClient{tb: tb, c: c, buf: make([]byte, 8192)}
}

func (rc *rawClient) get() {
	if _, err := rc.c.Write(rawRequest); err != nil {
		rc.tb.Fatal(err)
	}
	for {
		if h := bytes.Index(rc.buf[:rc.have], []byte("\r\n\r\n")); h >= 0 && rc.have >= h+4+1024 {
			rc.have = copy(rc.buf, rc.buf[h+4+1024:rc.have])
			return
		}
		m, err := rc.c.Read(rc.buf[rc.have:])
		if err != nil {
			rc.tb.Fatal(err)
		}
		rc.have += m
	}
}

// rawGets sends n keep-alive GETs on a new connection.
func rawGets(tb testing.TB, proxy string, n int) {
	rc := newRawClient(tb, proxy)
	defer rc.c.Close()
	for i := 0; i < n; i++ {
		rc.get()
	}
}

// BenchmarkEngineKeepAliveGET: one keep-alive connection through the
// engine to a pooled parent connection. allocs/op must read 0: the
// steady state of a keep-alive GET allocates nothing.
func BenchmarkEngineKeepAliveGET(b *testing.B) {
	proxy := startBenchProxy(b, rawParent(b))
	rawGets(b, proxy, 100) // warm: pools, buffers
	b.ReportAllocs()
	b.ResetTimer()
	rawGets(b, proxy, b.N)
}

// BenchmarkEngineKeepAliveGETParallel is the same over GOMAXPROCS
// connections.
func BenchmarkEngineKeepAliveGETParallel(b *testing.B) {
	proxy := startBenchProxy(b, rawParent(b))
	benchGetsParallel(b, proxy)
}

// TestKeepAliveGETAllocatesNothing: a keep-alive GET through the engine to
// a pooled parent connection allocates nothing in steady state, access log
// on.
func TestKeepAliveGETAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	rc := newRawClient(t, startBenchProxy(t, rawParent(t)))
	defer rc.c.Close()
	for i := 0; i < 200; i++ {
		rc.get() // warm: pools, buffers
	}
	if n := allocsPer(500, rc.get); n > 0.01 {
		t.Fatalf("%.3f allocations per keep-alive GET; want 0", n)
	}
}

// allocsPer is the mean number of heap allocations per call of f over
// runs calls, as a fraction: testing.AllocsPerRun rounds down, so an
// allocation every eighth request would read as none.
func allocsPer(runs int, f func()) float64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < runs; i++ {
		f()
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / float64(runs)
}

// The cache: a hit against a miss through the parent, in one run. A hit
// must cost well under a third of a miss (compare ns/op), and allocate
// nothing.

func cacheOn(tb testing.TB) *cache.Cache {
	c := cache.New(cache.DefaultConfig())
	if c == nil {
		tb.Fatal("no cache")
	}
	return c
}

// BenchmarkCacheHit: keep-alive GETs answered from memory.
func BenchmarkCacheHit(b *testing.B) {
	proxy := startBenchProxyCache(b, rawParentWith(b, "Cache-Control: max-age=3600\r\n"), cacheOn(b))
	benchGets(b, proxy)
}

// BenchmarkCacheMiss: the same GETs with the cache on and an answer it may
// not store: each goes to the parent.
func BenchmarkCacheMiss(b *testing.B) {
	proxy := startBenchProxyCache(b, rawParentWith(b, "Cache-Control: no-store\r\n"), cacheOn(b))
	benchGets(b, proxy)
}

// BenchmarkCacheHitParallel is BenchmarkCacheHit over GOMAXPROCS
// connections.
func BenchmarkCacheHitParallel(b *testing.B) {
	proxy := startBenchProxyCache(b, rawParentWith(b, "Cache-Control: max-age=3600\r\n"), cacheOn(b))
	benchGetsParallel(b, proxy)
}

// TestCacheHitAllocatesNothing: a hit, and a miss the cache may not store,
// allocate nothing in steady state.
func TestCacheHitAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	for name, fields := range map[string]string{"hit": "Cache-Control: max-age=3600\r\n", "uncacheable miss": "Cache-Control: no-store\r\n"} {
		ch := cacheOn(t)
		rc := newRawClient(t, startBenchProxyCache(t, rawParentWith(t, fields), ch))
		for i := 0; i < 200; i++ {
			rc.get()
		}
		if n := allocsPer(500, rc.get); n > 0.01 {
			t.Errorf("%s: %.3f allocations per keep-alive GET; want 0", name, n)
		}
		rc.c.Close()
		st := ch.Stats()
		if hit := name == "hit"; (hit && st.Hits < 700) || (!hit && st.Misses < 700) {
			t.Errorf("%s: cache stats %+v; the requests were not what the test meant", name, st)
		}
	}
}

// The ICP listener's question to the cache (is a fresh GET stored for
// this URL?) allocates nothing, and is answered right.
func TestICPHitAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	ch := cacheOn(t)
	addr, px := startBenchProxyCacheP(t, rawParentWith(t, "Cache-Control: max-age=3600\r\n"), ch)
	rc := newRawClient(t, addr)
	rc.get() // stores http://origin.test/obj
	rc.c.Close()
	stored, other := []byte("http://origin.test/obj"), []byte("http://ORIGIN.test:80/other")
	if !px.ICPHit(stored) || px.ICPHit(other) || px.ICPHit([]byte("not a url")) {
		t.Fatal("ICPHit: want a hit for the stored URL only")
	}
	if !px.ICPHit([]byte("http://Origin.Test:80/obj")) {
		t.Error("ICPHit does not normalise the key (host case, default port) as requests are")
	}
	if n := testing.AllocsPerRun(500, func() { px.ICPHit(stored); px.ICPHit(other) }); n > 0 {
		t.Errorf("%.2f allocations per ICP lookup; want 0", n)
	}
}

// benchGets times b.N keep-alive GETs through proxy after 100 to warm it.
func benchGets(b *testing.B, proxy string) {
	rawGets(b, proxy, 100)
	b.ReportAllocs()
	b.ResetTimer()
	rawGets(b, proxy, b.N)
}

// benchGetsParallel is benchGets over GOMAXPROCS connections.
func benchGetsParallel(b *testing.B, proxy string) {
	rawGets(b, proxy, 100)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		n := 0
		for pb.Next() {
			n++
		}
		rawGets(b, proxy, n)
	})
}
