package forwarding

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

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

func BenchmarkViaPeerd(b *testing.B) {
	parent := benchParent(b)
	defer parent.Close()
	log := logrus.New()
	log.SetLevel(logrus.ErrorLevel)
	u, _ := url.Parse(parent.URL)
	port, _ := strconv.Atoi(u.Port())
	reg, _ := peers.New(peers.Options{Health: peers.DefaultConfig(), ConnectTimeout: time.Second, Log: log},
		[]peers.Spec{{Name: "p", Host: "127.0.0.1", Port: port}})
	reg.Observe(reg.Get("p"), peers.Observation{At: time.Now(), Probe: true})
	cfg := DefaultConfig()
	px, err := New(Options{Config: cfg, Planner: selection.New(reg, selection.Options{}), Accounting: reg,
		Dialer: &dialer.Dialer{Reporter: reg, Log: log}, Log: log})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(px)
	srv.Config.ConnContext = ConnContext
	srv.Listener = Listener(srv.Listener)
	srv.Start()
	defer srv.Close()
	runGets(b, benchClient(srv.URL))
}
