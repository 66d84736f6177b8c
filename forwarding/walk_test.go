package forwarding

// Tests of the walker alone: a request, a generation with a fake hops
// (its own dialer and accounting), and the walk — no Proxy, no
// transaction, no client connection.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/peerd/peerd/dialer"
	"github.com/peerd/peerd/internal/h1"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
	"github.com/sirupsen/logrus/hooks/test"
	"golang.org/x/time/rate"
)

// fakeParents is a dialer and an accounting at once: each parent by name
// refuses connects or answers with a fixed response; every call the walk
// makes is recorded.
type fakeParents struct {
	mu       sync.Mutex
	answer   map[string]string // the raw response a parent writes; absent: refused
	calls    []string          // "dial a", "begin a", "end a", "answer b ok", in order
	received map[string]int    // requests each parent read
	conns    []net.Conn        // the parents' ends, closed by closeAll
}

// closeAll closes the parents' connections: what the walk left idle ends.
func (f *fakeParents) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
}

func (f *fakeParents) note(s string) {
	f.mu.Lock()
	f.calls = append(f.calls, s)
	f.mu.Unlock()
}

func (f *fakeParents) DialPeer(_ context.Context, p *peers.Peer, _ dialer.Purpose, _ time.Duration) (net.Conn, error) {
	f.note("dial " + p.Name())
	f.mu.Lock()
	resp, ok := f.answer[p.Name()]
	f.mu.Unlock()
	if !ok {
		return nil, errors.New("connection refused")
	}
	srv, cli := net.Pipe()
	f.mu.Lock()
	f.conns = append(f.conns, srv)
	f.mu.Unlock()
	go func() {
		defer srv.Close()
		br := bufio.NewReader(srv)
		for {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			f.mu.Lock()
			f.received[p.Name()]++
			f.mu.Unlock()
			if _, err := io.WriteString(srv, resp); err != nil {
				return
			}
		}
	}()
	return cli, nil
}

func (f *fakeParents) BeginRequest(p *peers.Peer, _ time.Time) bool {
	f.note("begin " + p.Name())
	return true
}
func (f *fakeParents) EndRequest(p *peers.Peer) { f.note("end " + p.Name()) }
func (f *fakeParents) Observe(p *peers.Peer, o peers.Outcome) {
	switch o.Event {
	case peers.ConnectSlow:
		f.note("slow " + p.Name())
	case peers.Answered:
		f.note(fmt.Sprintf("answer %s %v", p.Name(), o.Class))
	case peers.HeadLate:
		f.note("late " + p.Name())
	}
}
func (f *fakeParents) Settings() *peers.Settings { return nil }

// walkOnce walks one GET through parents a then b (first_up), with the
// fake parents as the generation's hops, and returns the attempt the
// walker answers with (nil: none) and the walker.
func walkOnce(t *testing.T, f *fakeParents, retryOn []int) (*attempt, *walker) {
	t.Helper()
	log, _ := test.NewNullLogger()
	reg := twoAliveParents(t, peers.DefaultConfig(), log)
	cfg := DefaultConfig()
	cfg.RetryOnStatus = retryOn
	rc := &runtimeConfig{Config: cfg, maxHeader: int(cfg.MaxHeaderSize)}
	for _, s := range retryOn {
		rc.retryStatus[s] = true
	}
	g := &generation{cfg: rc, routing: selection.New(reg, selection.Options{Policy: selection.FirstUp, Direct: selection.DirectNever}).Routing()}
	g.hops = hops{acct: f, dialer: f, pools: newPools(), budget: newRetryBudget(cfg.RetryBudget), hedges: &hedgeBudget{},
		metrics: NewMetrics(), health: reg.Settings(), maxHeader: rc.maxHeader,
		unsolicitedLog: &rate.Sometimes{Interval: time.Second}, log: log}
	rq := &request{}
	rq.reset(g, &client{str: "192.0.2.1"}, time.Now())
	rq.head = []byte("GET http://origin.test/x HTTP/1.1\r\nHost: origin.test\r\n\r\n")
	if err := h1.ParseRequest(rq.head, &rq.req); err != nil {
		t.Fatal(err)
	}
	rq.method, rq.port, rq.body.done = http.MethodGet, 80, true
	rq.facts = facts{idempotent: true, replayable: true}
	var w walker
	w.init(rq, nil, &clientWriter{})
	w.begin(g.routing.Plan(selection.Request{Method: http.MethodGet, URL: "http://origin.test/x", Host: "origin.test", Port: 80}))
	return w.walk(), &w
}

const fakeOK = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

// TestWalkerPassesARefusingParent: a parent that refuses the connect is
// passed for the next one, which answers; the refused one's slot is
// freed, and only the one that answered is judged by its answer.
func TestWalkerPassesARefusingParent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeParents{answer: map[string]string{"b": fakeOK}, received: map[string]int{}}
		defer f.closeAll()
		a, w := walkOnce(t, f, nil)
		if a == nil {
			t.Fatalf("no answer: %v", w.finalError())
		}
		defer a.release()
		if a.hop.Peer.Name() != "b" || a.status != 200 {
			t.Fatalf("answered by %s with %d; want b's 200", a.hop.Peer.Name(), a.status)
		}
		want := []string{"begin a", "dial a", "end a", "begin b", "dial b", "answer b ok"}
		if got := f.recorded(); !slices.Equal(got, want) {
			t.Fatalf("the walk did %q; want %q", got, want)
		}
	})
}

// TestWalkerRetriesAStatusOnTheNextParent: a 503 listed in
// retry_on_status sends an idempotent request on to the next parent; one
// not listed is the answer.
func TestWalkerRetriesAStatusOnTheNextParent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		unavailable := "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"
		f := &fakeParents{answer: map[string]string{"a": unavailable, "b": fakeOK}, received: map[string]int{}}
		defer f.closeAll()
		a, _ := walkOnce(t, f, []int{503})
		if a == nil || a.hop.Peer.Name() != "b" || a.status != 200 || f.received["a"] != 1 {
			t.Fatalf("got %+v after a read %d requests; want b's 200 after a's 503", a, f.received["a"])
		}
		a.release()

		f2 := &fakeParents{answer: map[string]string{"a": unavailable, "b": fakeOK}, received: map[string]int{}}
		defer f2.closeAll()
		f = f2
		a, _ = walkOnce(t, f, nil)
		if a == nil || a.hop.Peer.Name() != "a" || a.status != 503 || f.received["b"] != 0 {
			t.Fatalf("got %+v, b read %d requests; want a's 503 as the answer", a, f.received["b"])
		}
		a.release()
	})
}

// TestWalkerNoParentLeft: when every parent refuses, the walk ends with
// no attempt and the client's error names the last parent's connect
// failure.
func TestWalkerNoParentLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeParents{answer: map[string]string{}, received: map[string]int{}}
		defer f.closeAll()
		a, w := walkOnce(t, f, nil)
		if a != nil {
			t.Fatalf("answered by %s; want no attempt", a.hop.Peer.Name())
		}
		e := w.finalError()
		if e == nil || e.Status != http.StatusBadGateway || e.Code != CodeConnectFailed || e.Peer != "b" {
			t.Fatalf("final error %+v; want 502 %s naming b", e, CodeConnectFailed)
		}
		if got := f.recorded(); slices.Index(got, "end a") < 0 || slices.Index(got, "end b") < 0 {
			t.Fatalf("the walk did %q; want both slots freed", got)
		}
	})
}

func (f *fakeParents) recorded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}
