package forwarding

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/peerd/peerd/dialer"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
)

// pipeNet is an injected network: per address a connect delay and whether
// it then succeeds; accepted connections are served by a tiny HTTP proxy
// on the far end of a net.Pipe that records every request and byte.
type pipeNet struct {
	mu     sync.Mutex
	delay  map[string]time.Duration
	refuse map[string]bool
	// answerDelay holds a hop's answers back; status and fields change
	// what it answers (gray failures).
	answerDelay map[string]time.Duration
	status      map[string]int
	fields      map[string]string
	// bodyAfter writes a hop's body apart from its head, that long after
	// it (a body that is not in the head's segment).
	bodyAfter map[string]time.Duration
	stop      chan struct{} // closed by closeAll: held answers give up
	// handle, when set for an address, answers its requests itself (it
	// reads the body); false ends the connection.
	handle   map[string]func(req *http.Request, br *bufio.Reader, s net.Conn) bool
	requests map[string]int
	bytes    map[string]int
	dials    map[string]int
	conns    []net.Conn
}

func newPipeNet() *pipeNet {
	return &pipeNet{delay: map[string]time.Duration{}, refuse: map[string]bool{}, requests: map[string]int{}, bytes: map[string]int{}, dials: map[string]int{},
		answerDelay: map[string]time.Duration{}, bodyAfter: map[string]time.Duration{}, status: map[string]int{}, fields: map[string]string{}, stop: make(chan struct{}),
		handle: map[string]func(*http.Request, *bufio.Reader, net.Conn) bool{}}
}

func (n *pipeNet) Dial(ctx context.Context, _, addr string) (net.Conn, error) {
	n.mu.Lock()
	n.dials[addr]++
	d, refuse := n.delay[addr], n.refuse[addr]
	n.mu.Unlock()
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if refuse {
		return nil, errors.New("connection refused")
	}
	c, s := net.Pipe()
	n.mu.Lock()
	n.conns = append(n.conns, c, s)
	n.mu.Unlock()
	go n.serve(addr, s)
	return c, nil
}

type countReader struct {
	n    *pipeNet
	addr string
	r    io.Reader
}

func (c countReader) Read(b []byte) (int, error) {
	k, err := c.r.Read(b)
	c.n.mu.Lock()
	c.n.bytes[c.addr] += k
	c.n.mu.Unlock()
	return k, err
}

func (n *pipeNet) serve(addr string, s net.Conn) {
	defer s.Close()
	br := bufio.NewReader(countReader{n, addr, s})
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		n.mu.Lock()
		h := n.handle[addr]
		n.mu.Unlock()
		if h != nil {
			n.mu.Lock()
			n.requests[addr]++
			n.mu.Unlock()
			if !h(req, br, s) {
				return
			}
			continue
		}
		io.Copy(io.Discard, req.Body)
		n.mu.Lock()
		n.requests[addr]++
		wait, status, fields, after := n.answerDelay[addr], n.status[addr], n.fields[addr], n.bodyAfter[addr]
		n.mu.Unlock()
		if status == 0 {
			status = 200
		}
		switch {
		case status == -1: // closes without answering
			return
		case status < -1: // interim answer -status, then the held answer
			fmt.Fprintf(s, "HTTP/1.1 %d Early\r\n\r\n", -status)
			status = 200
		}
		if wait > 0 {
			select {
			case <-time.After(wait):
			case <-n.stop:
				return
			}
		}
		body := "from " + addr
		if after > 0 {
			fmt.Fprintf(s, "HTTP/1.1 %d X\r\n%sContent-Length: %d\r\n\r\n", status, fields, len(body))
			select {
			case <-time.After(after):
			case <-n.stop:
				return
			}
			if _, err := io.WriteString(s, body); err != nil {
				return
			}
			continue
		}
		fmt.Fprintf(s, "HTTP/1.1 %d X\r\n%sContent-Length: %d\r\n\r\n%s", status, fields, len(body), body)
	}
}

func (n *pipeNet) closeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	select {
	case <-n.stop:
	default:
		close(n.stop)
	}
	for _, c := range n.conns {
		c.Close()
	}
}

func (n *pipeNet) get(m map[string]int, addr string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return m[addr]
}

type rig struct {
	reg   *peers.Registry
	net   *pipeNet
	proxy *Proxy
}

const (
	addrA = "127.0.0.1:1"
	addrB = "127.0.0.1:2"
)

func newRig(t *testing.T, hedge HedgeDelay) *rig { return newRigWith(t, hedge, nil) }

// newRigWith is newRig with the [health] section changed by set.
func newRigWith(t *testing.T, hedge HedgeDelay, set func(*peers.Config)) *rig {
	t.Helper()
	log, _ := test.NewNullLogger()
	h := peers.DefaultConfig()
	if set != nil {
		set(&h)
	}
	h.ConnectFailLimit = 3
	h.ProbeInterval = time.Hour // no prober runs here
	h.ProbeMaxInterval = time.Hour
	reg := twoAliveParents(t, h, log)
	pn := newPipeNet()
	cfg := DefaultConfig()
	cfg.ConnectTimeout = time.Second
	cfg.Direct = selection.DirectNever
	cfg.ConnectHedgeDelay = hedge
	planner := selection.New(reg, selection.Options{Policy: selection.FirstUp, Direct: selection.DirectNever})
	px, err := New(Options{Config: cfg, Planner: planner, Accounting: reg,
		Dialer: &dialer.Dialer{Reporter: reg, Dial: pn.Dial, Log: log}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.CloseIdle(); pn.closeAll() })
	return &rig{reg: reg, net: pn, proxy: px}
}

// twoAliveParents is a registry of parents a (127.0.0.1:1) and b
// (127.0.0.1:2) under h, both alive by a probe.
func twoAliveParents(t *testing.T, h peers.Config, log logrus.FieldLogger) *peers.Registry {
	t.Helper()
	reg, err := peers.New(peers.Options{Health: h, ConnectTimeout: time.Second, Log: log}, []peers.Spec{
		{Name: "a", Host: "127.0.0.1", Port: 1}, {Name: "b", Host: "127.0.0.1", Port: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range reg.Peers() {
		reg.Observe(p, peers.Outcome{At: time.Now(), RTT: time.Millisecond, Probe: true})
	}
	return reg
}

// clientReply is what a test client got.
type clientReply struct {
	Code   int
	header http.Header
	body   string
}

func (r clientReply) Header() http.Header { return r.header }

// get sends one request through the engine over a pipe, as a client on
// 127.0.0.1 would, and reads the answer.
func (r *rig) get(t *testing.T, method string) (clientReply, time.Duration) {
	t.Helper()
	client, server := net.Pipe()
	defer client.Close()
	r.proxy.conns.admit(1 << 20)
	go newClientConn(r.proxy, fromLoopback{server}).serve()
	start := time.Now()
	req := method + " http://origin.test/x HTTP/1.1\r\nHost: origin.test\r\n"
	if method == "POST" || method == "PUT" {
		req += "Content-Length: 7\r\n\r\npayload"
	} else {
		req += "\r\n"
	}
	go io.WriteString(client, req)
	br := bufio.NewReader(client)
	resp, err := http.ReadResponse(br, nil)
	for err == nil && resp.StatusCode/100 == 1 { // interim answers relayed
		resp, err = http.ReadResponse(br, nil)
	}
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	b, _ := io.ReadAll(resp.Body)
	return clientReply{Code: resp.StatusCode, header: resp.Header, body: string(b)}, time.Since(start)
}

// fromLoopback gives a pipe end a client address inside the default allow
// list.
type fromLoopback struct{ net.Conn }

func (fromLoopback) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5555}
}

func TestHedgeStartsAfterDelayAndSecondWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, HedgeDelay{Auto: true})
		r.net.delay[addrA] = time.Hour // black-holed: times out at connect_timeout
		rec, took := r.get(t, "GET")
		if rec.Code != 200 || rec.body != "from "+addrB {
			t.Fatalf("%d %q", rec.Code, rec.body)
		}
		// Auto delay: max(50ms, 4 x 1ms smoothed connect time).
		if took != 50*time.Millisecond {
			t.Fatalf("answered after %v; want the 50ms hedge delay", took)
		}
		a := r.reg.Get("a")
		if !a.Health().Suspect() {
			t.Fatal("a peer with a connect pending past its hedge delay is suspect")
		}
		// The next request goes to the healthy peer at once.
		if _, took := r.get(t, "GET"); took != 0 {
			t.Fatalf("second request took %v; want no wait (a sorted behind b)", took)
		}
		// The slow connect still ends, and is counted, as a connect failure.
		time.Sleep(time.Second)
		synctest.Wait()
		if st := a.Health().Snapshot(); st.ConnectFailuresTotal != 1 || st.State != peers.Alive || st.ConsecutiveFailures != 1 {
			t.Fatalf("a = %+v; want one connect failure counted", st)
		}
		if n := r.net.get(r.net.bytes, addrA); n != 0 {
			t.Fatalf("%d bytes reached a", n)
		}
	})
}

func TestHedgeFirstConnectWinsAndWritesOnce(t *testing.T) {
	for _, m := range []string{"GET", "PUT"} {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, HedgeDelay{Delay: 50 * time.Millisecond})
			r.net.delay[addrA] = 70 * time.Millisecond  // slow, but first
			r.net.delay[addrB] = 100 * time.Millisecond // the hedge, slower
			rec, took := r.get(t, m)
			if rec.body != "from "+addrA || took != 70*time.Millisecond {
				t.Fatalf("%s: %q after %v; want a's answer at 70ms", m, rec.body, took)
			}
			time.Sleep(time.Second)
			synctest.Wait()
			if got := r.net.get(r.net.requests, addrA); got != 1 {
				t.Fatalf("a got %d requests; want 1", got)
			}
			if got := r.net.get(r.net.dials, addrB); got != 1 {
				t.Fatalf("b dialled %d times; want the hedge", got)
			}
			if got := r.net.get(r.net.bytes, addrB); got != 0 {
				t.Fatalf("the hedge's loser received %d bytes; want 0 (never written twice)", got)
			}
			// The loser's connect completed and counts (probe + hedge).
			if st := r.reg.Get("b").Health().Snapshot(); st.ConnectsTotal != 2 || st.ConnectFailuresTotal != 0 {
				t.Fatalf("b = %+v; the loser's connect still counts as a success", st)
			}
		})
	}
}

func TestNoHedgeWhenOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, HedgeDelay{})
		r.net.delay[addrA] = 300 * time.Millisecond
		rec, took := r.get(t, "GET")
		if rec.body != "from "+addrA || took != 300*time.Millisecond || r.net.get(r.net.dials, addrB) != 0 {
			t.Fatalf("%q after %v, b dials %d; want a after 300ms and no hedge", rec.body, took, r.net.get(r.net.dials, addrB))
		}
	})
}

func TestAllDeadAnswersAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, HedgeDelay{Auto: true})
		for _, p := range r.reg.Peers() {
			for i := 0; i < 3; i++ {
				r.reg.Observe(p, peers.Outcome{At: time.Now(), Err: errors.New("refused")})
			}
		}
		rec, took := r.get(t, "GET")
		if rec.Code != 503 || rec.Header().Get("X-Peerd-Error") != "no-peers" || took != 0 {
			t.Fatalf("%d %q after %v; want 503 no-peers at once", rec.Code, rec.Header().Get("X-Peerd-Error"), took)
		}
		if r.net.get(r.net.dials, addrA)+r.net.get(r.net.dials, addrB) != 0 {
			t.Fatal("dialled a dead peer")
		}
	})
}

func TestConnectFailureRetriedOnNextHop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, HedgeDelay{})
		r.net.refuse[addrA] = true
		rec, _ := r.get(t, "POST")
		if rec.Code != 200 || rec.body != "from "+addrB {
			t.Fatalf("%d %q", rec.Code, rec.body)
		}
		if st := r.reg.Get("a").Health().Snapshot(); st.ConnectFailuresTotal != 1 {
			t.Fatalf("a = %+v; want the refused connect counted", st)
		}
	})
}

// TestBlackHoledParentsCostOneTimeout: every parent's connects hang.
// The first request pays the connect timeouts; while the parents are
// suspect and not yet settled by a probe, the requests after it are
// answered at once instead of each waiting out a timeout of its own
// (they did, one after another, until connect_fail_limit).
func TestBlackHoledParentsCostOneTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, HedgeDelay{})
		r.net.delay[addrA] = time.Hour
		r.net.delay[addrB] = time.Hour
		rec, took := r.get(t, "GET")
		if rec.Code != 502 || took != 2*time.Second {
			t.Fatalf("first: %d after %v; want 502 after both 1s connect timeouts", rec.Code, took)
		}
		for i := range 10 {
			rec, took := r.get(t, "GET")
			if rec.Code != 503 || took != 0 {
				t.Fatalf("request %d: %d after %v; want 503 at once", i, rec.Code, took)
			}
		}
		for _, n := range []string{"a", "b"} {
			if p := r.reg.Get(n); !p.Health().Suspect() || p.Health().State() != peers.Alive {
				t.Fatalf("%s: %v, suspect %v; want alive and suspect (only probes settle it)", n, p.Health().State(), p.Health().Suspect())
			}
		}
	})
}
