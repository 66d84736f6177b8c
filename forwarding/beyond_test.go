package forwarding

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
)

// cannotReach is a parent that cannot reach host (its connect there is
// refused: it answers as Squid does) and answers "from NAME" for every
// other destination; it counts the requests it got per host.
func cannotReach(name, host string, mu *sync.Mutex, got map[string]int) func(*http.Request, *bufio.Reader, net.Conn) bool {
	return func(req *http.Request, br *bufio.Reader, s net.Conn) bool {
		io.Copy(io.Discard, req.Body)
		h := req.URL.Hostname()
		if req.Method == http.MethodConnect {
			h, _, _ = net.SplitHostPort(req.Host)
		}
		mu.Lock()
		got[name+" "+h]++
		mu.Unlock()
		if strings.EqualFold(h, host) {
			io.WriteString(s, "HTTP/1.1 503 Service Unavailable\r\nX-Squid-Error: ERR_CONNECT_FAIL 111\r\nContent-Length: 4\r\n\r\nfail")
			return true
		}
		if req.Method == http.MethodConnect {
			return echoTunnel(req, br, s)
		}
		io.WriteString(s, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len("from "+name))+"\r\n\r\nfrom "+name)
		return true
	}
}

// TestParentThatCannotReachADestinationIsPassedBy: parent a says a
// request for bad.test never reached it (Squid's ERR_CONNECT_FAIL). The
// request goes on to b — a GET, a POST whose body peerd holds, a CONNECT
// — and the client never sees a's error; a is not blamed (no answer
// failure, not suspect), is not asked for bad.test again once it said so
// three times in a row, and keeps every other destination.
func TestParentThatCannotReachADestinationIsPassedBy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, selection.DirectNever, nil)
		var mu sync.Mutex
		got := map[string]int{}
		e.net.handle[addrA] = cannotReach("a", "bad.test", &mu, got)
		e.net.handle[addrB] = cannotReach("b", "", &mu, got)
		c := e.dial()
		if resp, body := c.do(t, "POST http://bad.test/p HTTP/1.1\r\nHost: bad.test\r\nContent-Length: 4\r\n\r\nbody"); resp.StatusCode != 200 || body != "from b" {
			t.Fatalf("POST for bad.test: %d %q; want b's answer (nothing reached the origin through a)", resp.StatusCode, body)
		}
		for i := 0; i < 3; i++ {
			if resp, body := c.do(t, "GET http://bad.test/x HTTP/1.1\r\nHost: bad.test\r\n\r\n"); resp.StatusCode != 200 || body != "from b" {
				t.Fatalf("GET for bad.test: %d %q; want b's answer", resp.StatusCode, body)
			}
		}
		if resp, body := c.do(t, "GET http://good.test/y HTTP/1.1\r\nHost: good.test\r\n\r\n"); resp.StatusCode != 200 || body != "from a" {
			t.Fatalf("GET for good.test: %d %q; want a's answer (first-up: a keeps every other destination)", resp.StatusCode, body)
		}
		tc := e.dial()
		resp, _ := tc.do(t, "CONNECT bad.test:443 HTTP/1.1\r\nHost: bad.test:443\r\n\r\n")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT bad.test:443: %d; want b's tunnel", resp.StatusCode)
		}
		tc.nc.Close()
		synctest.Wait()
		mu.Lock()
		asked := got["a bad.test"]
		mu.Unlock()
		if asked != 3 {
			t.Fatalf("a was asked for bad.test %d times; want 3 (then passed by: peers' destFailLimit)", asked)
		}
		a := e.reg.Get("a").Health()
		s := a.Snapshot()
		if s.State != peers.Alive || s.Suspect || s.AnswerFailures != 0 || len(s.Unreachable) != 1 || s.Unreachable[0].Destination != "bad.test" || s.UpstreamErrors["ERR_CONNECT_FAIL"] != 3 {
			t.Fatalf("a: %v suspect %v, %d answer failures, unreachable %+v, upstream errors %v; want alive, unblamed, bad.test marked",
				s.State, s.Suspect, s.AnswerFailures, s.Unreachable, s.UpstreamErrors)
		}
	})
}

// TestParentWithoutNextHopIsCutOff: a peerd parent whose own parents are
// all dead answers no-peers with no-next-hop in its Proxy-Status member:
// the request goes on to b, and a is sent nothing more, for any
// destination, until its probe's answer says it has a next hop.
func TestParentWithoutNextHopIsCutOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, selection.DirectNever, nil)
		var mu sync.Mutex
		got := map[string]int{}
		e.net.handle[addrA] = func(req *http.Request, br *bufio.Reader, s net.Conn) bool {
			mu.Lock()
			got["a"]++
			mu.Unlock()
			io.WriteString(s, "HTTP/1.1 503 Service Unavailable\r\nX-Peerd-Error: no-peers\r\nProxy-Status: a; error=destination_unavailable; no-next-hop\r\nContent-Length: 0\r\n\r\n")
			return true
		}
		e.net.handle[addrB] = cannotReach("b", "", &mu, got)
		c := e.dial()
		for _, host := range []string{"one.test", "two.test", "three.test"} {
			if resp, body := c.do(t, "GET http://"+host+"/ HTTP/1.1\r\nHost: "+host+"\r\n\r\n"); resp.StatusCode != 200 || body != "from b" {
				t.Fatalf("GET %s: %d %q; want b's answer", host, resp.StatusCode, body)
			}
		}
		mu.Lock()
		n := got["a"]
		mu.Unlock()
		a := e.reg.Get("a").Health()
		if n != 1 || !a.NoNextHop() || a.Eligible() || a.Suspect() || len(a.Unreachable()) != 0 {
			t.Fatalf("a asked %d times, cut off %v, eligible %v, suspect %v, marks %v; want once, cut off, unblamed, no mark",
				n, a.NoNextHop(), a.Eligible(), a.Suspect(), a.Unreachable())
		}
		e.reg.Observe(e.reg.Get("a"), peers.Outcome{Event: peers.HTTPProbed}) // its probe's answer: a next hop again
		if !a.Eligible() {
			t.Fatal("a probe's answer with a next hop did not put a back")
		}
	})
}
