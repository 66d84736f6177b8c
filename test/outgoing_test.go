package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
)

// TestOutgoingAddress: with [proxy] outgoing_address (Squid
// tcp_outgoing_address), every connection peerd opens, to a parent (its
// probes too) and to an origin, comes from that address; a parent that
// lets in one address only still serves it.
func TestOutgoingAddress(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	from := map[string]int{} // source address -> connections, at the parent and the origin
	listen := func() (string, *http.Server) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }),
			ConnState: func(c net.Conn, st http.ConnState) {
				if st == http.StateNew {
					host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
					mu.Lock()
					from[host]++
					mu.Unlock()
				}
			},
		}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return ln.Addr().String(), srv
	}
	parent, _ := listen()
	origin, _ := listen()
	_, port, _ := net.SplitHostPort(parent)
	cfg := withProxy(directConfig, `outgoing_address = "127.0.0.2"`) + fmt.Sprintf(`
[[peer]]
name = "p"
host = "127.0.0.1"
port = %s
[[route]]
domains = ["via-parent.test"]
peers = ["p"]
direct = "never"
[[route]]
direct = "always"
`, port)
	p := startPeerd(t, cfg)
	for _, target := range []string{"http://via-parent.test/x", "http://" + origin + "/y"} {
		resp, err := p.client().Get(target)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("%s: %d %q; want the 200 of the parent or origin", target, resp.StatusCode, body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if from["127.0.0.2"] < 3 || len(from) != 1 {
		t.Fatalf("connections by source address %v; want every one (the probe, the parent's request, the origin's) from 127.0.0.2", from)
	}
}
