package forwarding

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/peerd/peerd/dialer"
	"github.com/peerd/peerd/fleet"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
	"github.com/sirupsen/logrus/hooks/test"
)

// memberFleet is a fleet of which every member request verifies.
type memberFleet struct{}

func (memberFleet) Owner([]byte) (string, *peers.Peer, bool, bool)  { return "", nil, false, false }
func (memberFleet) Sign(string, []byte) []byte                      { return []byte("sig") }
func (f memberFleet) Routing(rt selection.Routing) selection.Router { return fleet.NewRouting(rt, f) }
func (memberFleet) Verify(_, _ []byte, _ netip.Addr) (string, bool) { return "m1", true }
func (memberFleet) OwnerSkipped()                                   {}
func (memberFleet) OwnerAnswered(bool)                              {}
func (memberFleet) Served()                                         {}
func (memberFleet) FetchBegin()                                     {}
func (memberFleet) FetchEnd()                                       {}
func (memberFleet) HotCopies() float64                              { return 0 }
func (memberFleet) HotCopyKept()                                    {}

// TestClosedConnectionIsFlushed: a connection that closes after an
// answer (here a member request on a connection whose source is outside
// [proxy] allow, which is never kept open) sends the whole answer first.
// The end of the body used to wait in the write buffer for a next
// request that never came, and the close cut it. The client is one end
// of a socket pair: a real socket (the deferred flush needs one) with no
// IP address, so outside any allow list.
func TestClosedConnectionIsFlushed(t *testing.T) {
	log, _ := test.NewNullLogger()
	h := peers.DefaultConfig()
	h.ProbeInterval, h.ProbeMaxInterval = time.Hour, time.Hour
	reg := twoAliveParents(t, h, log)
	pn := newPipeNet()
	const size = 300_001
	pn.handle[addrA] = func(req *http.Request, br *bufio.Reader, s net.Conn) bool {
		fmt.Fprintf(s, "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: %d\r\n\r\n", size)
		for left := size; left > 0; left -= 1000 { // in pieces: the last one waits in a buffer
			s.Write(bytes.Repeat([]byte("x"), min(left, 1000)))
		}
		return true
	}
	cfg := DefaultConfig()
	cfg.Direct = selection.DirectNever
	planner := selection.New(reg, selection.Options{Policy: selection.FirstUp, Direct: selection.DirectNever})
	px, err := New(Options{Config: cfg, Planner: planner, Accounting: reg, Plans: memberFleet{}, Members: memberFleet{},
		Dialer: &dialer.Dialer{Reporter: reg, Dial: pn.Dial, Log: log}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { px.CloseIdle(); pn.closeAll() }()
	px.SetCache(newCache(t, 0))
	for i := range 2 { // a miss, then a hit
		client, server := socketPair(t)
		defer client.Close()
		px.accept(server)
		go io.WriteString(client, "GET http://origin.test/x HTTP/1.1\r\nHost: origin.test\r\n"+memberField+": sig\r\n\r\n")
		client.SetDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(client), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || len(b) != size {
			t.Fatalf("request %d: %d, %d of %d body bytes (%v); want the whole answer", i, resp.StatusCode, len(b), size, err)
		}
	}
}

// socketPair is two connected Unix stream sockets.
func socketPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	var cs [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = c
	}
	return cs[0], cs[1]
}

// ownerFleet is a fleet in which another member owns every key.
type ownerFleet struct {
	memberFleet
	owner *peers.Peer
}

func (f ownerFleet) Owner([]byte) (string, *peers.Peer, bool, bool) {
	return f.owner.Name(), f.owner, false, true
}

func (f ownerFleet) Routing(rt selection.Routing) selection.Router { return fleet.NewRouting(rt, f) }

// TestOwnerDeathMidBodyIsRetried: the key's owner sends a head and half
// the body, then dies. The client gets the object whole from the plan's
// parent, never a head with a cut body: a small owner answer is read
// whole before any of it is relayed.
func TestOwnerDeathMidBodyIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const addrC = "127.0.0.1:3"
		e := newEngine(t, selection.DirectNever, nil)
		e.proxy.SetCache(newCache(t, 0))
		e.setFleet(ownerFleet{owner: peers.NewMember("c", "127.0.0.1", 3, time.Second)})
		e.net.handle[addrC] = func(req *http.Request, br *bufio.Reader, s net.Conn) bool {
			io.WriteString(s, "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 1000\r\n\r\n")
			s.Write(bytes.Repeat([]byte("c"), 500))
			return false // dies
		}
		e.net.handle[addrA] = cacheable("from a")
		resp, body := e.dial().do(t, "GET http://origin.test/o HTTP/1.1\r\nHost: origin.test\r\n\r\n")
		if resp.StatusCode != 200 || body != "from a" {
			t.Fatalf("%d %q; want a's whole answer", resp.StatusCode, body)
		}
		if n := e.net.get(e.net.requests, addrC); n != 1 {
			t.Fatalf("the owner was asked %d times; want 1", n)
		}
	})
}

// setFleet makes the engine's proxy a fleet member with f (its plan
// source, member authenticator and cache part), from the next request's
// generation on.
func (e *engine) setFleet(f interface {
	PlanSource
	Members
}) {
	e.proxy.plans, e.proxy.members = f, f
	e.proxy.change(func(*generation) {})
}

// failuresOf is the engine's accounting, recording the answer failures
// reported of fleet members, as "node class about".
type failuresOf struct {
	peers.Accounting
	failed *[]string
}

func (a failuresOf) Observe(p *peers.Peer, o peers.Outcome) {
	if p.Type() == peers.Sibling && o.Event == peers.Answered && o.Class != peers.AnswerOK { // the member
		*a.failed = append(*a.failed, fmt.Sprintf("%s %s %d", p.Name(), o.Class, o.Origin))
	}
	a.Accounting.Observe(p, o)
}

// TestOwnerRelaysOriginError: an origin's 500 that the key's owner
// relays is the answer, relayed once: the plan's parent is not asked
// again, and the owner is not blamed. The owner's own error (a peerd
// error page) sends the request to the parent, and makes the owner
// suspect for that key alone.
func TestOwnerRelaysOriginError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const addrC = "127.0.0.1:3"
		e := newEngine(t, selection.DirectNever, nil)
		e.proxy.SetCache(newCache(t, 0))
		var failed []string
		e.proxy.acct = failuresOf{e.proxy.acct, &failed}
		e.setFleet(ownerFleet{owner: peers.NewMember("c", "127.0.0.1", 3, time.Second)})
		e.net.handle[addrC] = func(req *http.Request, br *bufio.Reader, s net.Conn) bool {
			if req.URL.Path == "/own" {
				io.WriteString(s, "HTTP/1.1 503 Service Unavailable\r\nX-Peerd-Error: no-peers\r\nContent-Length: 0\r\n\r\n")
				return true
			}
			io.WriteString(s, "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 6\r\n\r\norigin")
			return true
		}
		e.net.handle[addrA] = cacheable("from a")
		c := e.dial()
		resp, body := c.do(t, "GET http://origin.test/fails HTTP/1.1\r\nHost: origin.test\r\n\r\n")
		if resp.StatusCode != 500 || body != "origin" || e.net.get(e.net.requests, addrA) != 0 || len(failed) != 0 {
			t.Fatalf("%d %q, %d parent requests, owner failures %v; want the origin's 500 relayed once, no parent request, no blame",
				resp.StatusCode, body, e.net.get(e.net.requests, addrA), failed)
		}
		resp, body = c.do(t, "GET http://origin.test/own HTTP/1.1\r\nHost: origin.test\r\n\r\n")
		if want := fmt.Sprintf("c own_5xx %d", fleet.KeyHash([]byte("http://origin.test/own"))); resp.StatusCode != 200 || body != "from a" || len(failed) != 1 || failed[0] != want {
			t.Fatalf("%d %q, owner failures %v; want a's answer and c suspected for that key alone", resp.StatusCode, body, failed)
		}
	})
}
