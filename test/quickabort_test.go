package e2e

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestQuickAbortFinishesTheDownload: a client that leaves a download
// being stored when little of it is left does not waste it (Squid's
// quick_abort_*): peerd reads the rest from the next hop into the cache,
// and the next client gets a hit, the origin having been asked once.
func TestQuickAbortFinishesTheDownload(t *testing.T) {
	t.Parallel()
	const head, tail = 256 << 10, 8 << 10 // what the origin sends before and after the client leaves
	left := make(chan struct{})           // the client has gone
	var requests atomic.Int32
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Length", strconv.Itoa(head+tail))
		w.Write([]byte(strings.Repeat("h", head)))
		w.(http.Flusher).Flush()
		<-left
		w.Write([]byte(strings.Repeat("t", tail)))
	})
	// Wherever peerd finds the client gone (how much of the head the
	// sockets between them held), less than quick_abort_min is left.
	p := startPeerd(t, directConfig+"\n[cache]\nquick_abort_min = \"1MiB\"\nquick_abort_max = \"1MiB\"\n")
	c, err := net.Dial("tcp", p.proxy)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET http://"+origin+"/big HTTP/1.1\r\nHost: "+origin+"\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	// Closing with bytes unread resets the connection: peerd's next write
	// to it fails, with the body not yet whole (the origin holds its tail
	// until then). Before quick_abort, the download stopped there and
	// nothing was stored.
	c.(*net.TCPConn).SetLinger(0)
	c.Close()
	close(left)

	deadline := time.Now().Add(10 * time.Second)
	for {
		req, _ := http.NewRequest("GET", "http://"+origin+"/big", nil)
		req.Header.Set("Cache-Control", "only-if-cached")
		resp, err := p.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			if n != head+tail || !strings.HasPrefix(resp.Header.Get("X-Cache"), "HIT") {
				t.Fatalf("%d bytes, X-Cache %q; want the whole body from the cache", n, resp.Header.Get("X-Cache"))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the download the client left is not stored (only-if-cached: %d)", resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("the origin was asked %d times; want 1", n)
	}
	for !strings.Contains(readFile(t, p.accessLog), "TCP_MISS_ABORTED/200") {
		if time.Now().After(deadline) {
			t.Fatalf("the leaving client's request is not logged as aborted:\n%s", readFile(t, p.accessLog))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
