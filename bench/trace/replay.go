package trace

// This file holds the replay of a trace through a running proxy: an
// origin of its own that serves each object with exactly its size and
// counts what reached it, and a client that asks for the trace's objects
// in order through the proxy. The hit ratios are one minus what reached
// the origin.

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Origin serves GET /o/ID/SIZE with SIZE bytes, cacheable for a day
// (with a validator), and counts the requests and bytes it served.
type Origin struct {
	Addr     string
	srv      *http.Server
	requests atomic.Int64
	bytes    atomic.Int64
}

// chunk is the bytes bodies are made of.
var chunk = []byte(strings.Repeat("0123456789abcdef", 4096))

// StartOrigin listens on a loopback port.
func StartOrigin() (*Origin, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	o := &Origin{Addr: ln.Addr().String()}
	o.srv = &http.Server{Handler: o, ReadHeaderTimeout: 10 * time.Second}
	go o.srv.Serve(ln)
	return o, nil
}

// Close stops the origin.
func (o *Origin) Close() { o.srv.Close() }

// Served is the requests and body bytes the origin served.
func (o *Origin) Served() (requests, bytes int64) { return o.requests.Load(), o.bytes.Load() }

func (o *Origin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/o/"), "/")
	if len(parts) != 2 {
		http.Error(w, "want /o/ID/SIZE", http.StatusNotFound)
		return
	}
	size, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || size <= 0 {
		http.Error(w, "bad size", http.StatusNotFound)
		return
	}
	o.requests.Add(1)
	h := w.Header()
	h.Set("Cache-Control", "max-age=86400")
	h.Set("ETag", `"`+parts[0]+"-"+parts[1]+`"`)
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	if r.Method == http.MethodHead {
		return
	}
	for left := size; left > 0; {
		n := min(left, int64(len(chunk)))
		w.Write(chunk[:n])
		left -= n
		o.bytes.Add(n)
	}
}

// URL is the address of q's object at the origin.
func (o *Origin) URL(q Request) string { return fmt.Sprintf("http://%s/o/%d/%d", o.Addr, q.ID, q.Size) }

// Replayed is what a replay came to: the requests and bytes asked for,
// what reached the origin, and the answers that were not the object
// whole (an error status or a wrong length).
type Replayed struct {
	Requests, OriginRequests int64
	Bytes, OriginBytes       int64
	Wrong                    int64
	FirstWrong               string // what the first wrong answer was
	Took                     time.Duration
}

// ObjectHitRatio is one minus the share of requests that reached the
// origin.
func (r Replayed) ObjectHitRatio() float64 {
	return 1 - ratio(float64(r.OriginRequests), float64(r.Requests))
}

// ByteHitRatio is one minus the share of bytes the origin served.
func (r Replayed) ByteHitRatio() float64 { return 1 - ratio(float64(r.OriginBytes), float64(r.Bytes)) }

func (r *Replayed) wrong(what string) {
	if r.Wrong == 0 {
		r.FirstWrong = what
	}
	r.Wrong++
}

// Replay asks for t's objects in order through the proxy at proxyAddr
// (host:port), one at a time, and returns what came of it. It gives up
// after limit (0: none), reporting what it replayed.
func Replay(t *Trace, o *Origin, proxyAddr string, limit time.Duration) (Replayed, error) {
	pu, err := url.Parse("http://" + proxyAddr)
	if err != nil {
		return Replayed{}, err
	}
	tr := &http.Transport{Proxy: http.ProxyURL(pu), MaxIdleConnsPerHost: 4, DisableCompression: true}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: time.Minute}
	r0, b0 := o.Served()
	var r Replayed
	start := time.Now()
	for _, q := range t.Requests {
		if limit > 0 && time.Since(start) > limit {
			break
		}
		r.Requests++
		r.Bytes += q.Size
		resp, err := cl.Get(o.URL(q))
		if err != nil {
			r.wrong(err.Error())
			continue
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || n != q.Size {
			r.wrong(fmt.Sprintf("%s: %s with %d of %d bytes", o.URL(q), resp.Status, n, q.Size))
		}
	}
	r.Took = time.Since(start)
	r1, b1 := o.Served()
	r.OriginRequests, r.OriginBytes = r1-r0, b1-b0
	return r, nil
}
