package probes

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/peerd/peerd/dialer"
	"github.com/peerd/peerd/peers"
	"github.com/sirupsen/logrus/hooks/test"
)

// fakeNet is an injected dialer: per address it refuses, accepts (a
// net.Pipe end) or blocks until the context ends. It records every dial.
type fakeNet struct {
	mu     sync.Mutex
	mode   map[string]string // "refuse" (default), "accept", "block"
	dials  map[string][]time.Time
	active map[string]int // dials in flight now
	probes []string       // HTTP probes seen: method and Max-Forwards
	maxAct map[string]int
}

func newFakeNet() *fakeNet {
	return &fakeNet{mode: map[string]string{}, dials: map[string][]time.Time{}, active: map[string]int{}, maxAct: map[string]int{}}
}

func (f *fakeNet) set(addr, mode string) {
	f.mu.Lock()
	f.mode[addr] = mode
	f.mu.Unlock()
}

func (f *fakeNet) count(addr string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.dials[addr])
}

func (f *fakeNet) times(addr string) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.dials[addr]...)
}

func (f *fakeNet) Dial(ctx context.Context, _, addr string) (net.Conn, error) {
	f.mu.Lock()
	f.dials[addr] = append(f.dials[addr], time.Now())
	mode := f.mode[addr]
	f.active[addr]++
	if f.active[addr] > f.maxAct[addr] {
		f.maxAct[addr] = f.active[addr]
	}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.active[addr]--
		f.mu.Unlock()
	}()
	switch mode {
	case "accept":
		c1, c2 := net.Pipe()
		go func() {
			// The peer side: a probe must send nothing before closing.
			buf := make([]byte, 1)
			if n, _ := c2.Read(buf); n != 0 {
				panic("probe wrote bytes to the peer")
			}
			c2.Close()
		}()
		return c1, nil
	case "block":
		<-ctx.Done()
		return nil, ctx.Err()
	case "http-ok", "http-hang", "http-503":
		// A parent's proxy port: it reads the probe's request and answers
		// 501 (as Squid does to OPTIONS with Max-Forwards: 0), 503, or
		// nothing at all.
		c1, c2 := net.Pipe()
		go func() {
			defer c2.Close()
			req, err := http.ReadRequest(bufio.NewReader(c2))
			if err != nil {
				return
			}
			f.mu.Lock()
			f.probes = append(f.probes, req.Method+" "+req.Header.Get("Max-Forwards"))
			f.mu.Unlock()
			switch mode {
			case "http-ok":
				io.WriteString(c2, "HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\n\r\n")
			case "http-503":
				io.WriteString(c2, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
			default:
				io.Copy(io.Discard, c2) // until the prober gives up
			}
		}()
		return c1, nil
	}
	return nil, errors.New("connect: connection refused")
}

type env struct {
	reg *peers.Registry
	net *fakeNet
	pr  *Prober
}

func setup(t *testing.T, h peers.Config, specs ...peers.Spec) *env {
	return setupJitter(t, h, 0.5, specs...)
}

func setupJitter(t *testing.T, h peers.Config, jitter float64, specs ...peers.Spec) *env {
	t.Helper()
	log, _ := test.NewNullLogger()
	reg, err := peers.New(peers.Options{Health: h, ConnectTimeout: 2 * time.Second, Log: log}, specs)
	if err != nil {
		t.Fatal(err)
	}
	fn := newFakeNet()
	d := &dialer.Dialer{Reporter: reg, Dial: fn.Dial, Log: log}
	// Fixed jitter keeps back-off sequences exact; spread is tested on
	// NextDelay directly.
	pr := New(Options{Registry: reg, Dialer: d, Log: log, Jitter: func() float64 { return jitter }})
	return &env{reg: reg, net: fn, pr: pr}
}

func health(limit int) peers.Config {
	h := peers.DefaultConfig()
	h.ConnectFailLimit = limit
	return h
}

func (e *env) run(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.pr.Run(ctx); close(done) }()
	return func() { cancel(); <-done }
}

const a1 = "127.0.0.1:1"

func TestUnknownPeerProbedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, health(3), peers.Spec{Name: "p1", Host: "127.0.0.1", Port: 1})
		e.net.set(a1, "accept")
		stop := e.run(t)
		defer stop()
		synctest.Wait()
		p := e.reg.Get("p1")
		if p.Health().State() != peers.Alive {
			t.Fatalf("state = %v; want alive after the first probe", p.Health().State())
		}
		if got := e.net.count(a1); got != 1 {
			t.Fatalf("dials = %d; want 1", got)
		}
		// Alive and no idle_probe: no more probes, ever.
		time.Sleep(time.Hour)
		synctest.Wait()
		if got := e.net.count(a1); got != 1 {
			t.Fatalf("dials = %d after an hour alive; want 1 (no idle probing configured)", got)
		}
	})
}

func TestDeadPeerBackOffAndRevival(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := health(1)
		h.ProbeInterval = time.Second
		h.ProbeMaxInterval = 5 * time.Second
		e := setupJitter(t, h, 0.999, peers.Spec{Name: "p1", Host: "127.0.0.1", Port: 1})
		stop := e.run(t)
		defer stop()
		synctest.Wait() // first probe refused: dead
		p := e.reg.Get("p1")
		if p.Health().State() != peers.Dead {
			t.Fatalf("state = %v; want dead", p.Health().State())
		}
		time.Sleep(30 * time.Second)
		synctest.Wait()
		ts := e.net.times(a1)
		if len(ts) < 5 {
			t.Fatalf("only %d probes in 30s", len(ts))
		}
		if d := ts[1].Sub(ts[0]); d != h.ProbeInterval {
			t.Errorf("first re-probe after %v; want probe_interval %v", d, h.ProbeInterval)
		}
		for i := 2; i < len(ts); i++ {
			d := ts[i].Sub(ts[i-1])
			if d < h.ProbeInterval || d > h.ProbeMaxInterval {
				t.Errorf("gap %d = %v; want within [%v, %v]", i, d, h.ProbeInterval, h.ProbeMaxInterval)
			}
		}
		if last := ts[len(ts)-1].Sub(ts[len(ts)-2]); last < h.ProbeMaxInterval*98/100 {
			t.Errorf("long-dead gap = %v; want near the cap %v", last, h.ProbeMaxInterval)
		}
		// The peer comes back: the next probe revives it.
		e.net.set(a1, "accept")
		back := time.Now()
		time.Sleep(h.ProbeMaxInterval)
		synctest.Wait()
		if p.Health().State() != peers.Alive {
			t.Fatalf("state = %v %v after return; want alive within probe_max_interval", p.Health().State(), time.Since(back))
		}
		if p.Health().Snapshot().ConsecutiveFailures != 0 || p.Health().Snapshot().RevivalsTotal != 1 {
			t.Fatalf("revived with consecutive=%d revivals=%d", p.Health().Snapshot().ConsecutiveFailures, p.Health().Snapshot().RevivalsTotal)
		}
	})
}

// TestNoIdleDeadUse leaves a dead peer idle for an hour of injected clock.
// At no instant is it eligible for a client request; it comes back only
// after a probe connected, and no connection other than probes was made.
func TestNoIdleDeadUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := health(2)
		e := setup(t, h, peers.Spec{Name: "p1", Host: "127.0.0.1", Port: 1})
		e.net.set(a1, "accept")
		stop := e.run(t)
		defer stop()
		synctest.Wait()
		p := e.reg.Get("p1")
		e.net.set(a1, "refuse")
		// Two client connects fail: dead.
		for i := 0; i < 2; i++ {
			if _, err := (&dialer.Dialer{Reporter: e.reg, Dial: e.net.Dial}).DialPeer(context.Background(), p, dialer.Traffic, 0); err == nil {
				t.Fatal("dial succeeded")
			}
		}
		if p.Health().State() != peers.Dead {
			t.Fatal("want dead")
		}
		for i := 0; i < 3600; i++ {
			time.Sleep(time.Second)
			synctest.Wait()
			if p.Health().Eligible() {
				t.Fatalf("dead peer eligible for traffic after %ds idle", i+1)
			}
		}
		probes := p.Health().Snapshot().ProbesTotal
		if probes < 3600/5 || probes > 3600/1 {
			t.Fatalf("%d probes in an hour; want between 720 and 3600", probes)
		}
		e.net.set(a1, "accept")
		time.Sleep(h.ProbeMaxInterval)
		synctest.Wait()
		if !p.Health().Eligible() {
			t.Fatal("not revived by probe")
		}
		st := p.Health().Snapshot()
		if st.ProbesTotal != probes+1 || st.ConnectsTotal != st.ProbesTotal+2 {
			t.Fatalf("probes %d connects %d: a non-probe connect happened while dead", st.ProbesTotal, st.ConnectsTotal)
		}
	})
}

func TestNoProbesInMaintenance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := health(1)
		e := setup(t, h, peers.Spec{Name: "p1", Host: "127.0.0.1", Port: 1})
		stop := e.run(t)
		defer stop()
		synctest.Wait()
		if _, err := e.reg.SetAdminState("p1", peers.Maintenance); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		n := e.net.count(a1)
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := e.net.count(a1); got != n {
			t.Fatalf("%d probes during maintenance; want 0", got-n)
		}
		p := e.reg.Get("p1")
		// Enabled again while still down: it stays dead (enabling is not a
		// probe), and probing resumes at once.
		e.reg.SetAdminState("p1", peers.Enabled)
		synctest.Wait()
		if p.Health().State() != peers.Dead || e.net.count(a1) != n+1 {
			t.Fatalf("after enabling: state %v, %d new probes; want dead and 1 probe", p.Health().State(), e.net.count(a1)-n)
		}
		e.net.set(a1, "accept")
		time.Sleep(h.ProbeMaxInterval)
		synctest.Wait()
		if p.Health().State() != peers.Alive {
			t.Fatalf("state = %v; want alive after a successful probe", p.Health().State())
		}
	})
}

func TestIdleProbeFindsDeadIdlePeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := health(2)
		h.IdleProbe = 10 * time.Second
		e := setup(t, h, peers.Spec{Name: "p1", Host: "127.0.0.1", Port: 1})
		e.net.set(a1, "accept")
		stop := e.run(t)
		defer stop()
		synctest.Wait()
		p := e.reg.Get("p1")
		time.Sleep(10*time.Second + time.Millisecond)
		synctest.Wait()
		if got := e.net.count(a1); got != 2 {
			t.Fatalf("dials = %d; want the idle probe after 10s", got)
		}
		// Traffic keeps it from being probed.
		for i := 0; i < 5; i++ {
			e.reg.BeginRequest(p, time.Now())
			e.reg.EndRequest(p)
			time.Sleep(5 * time.Second)
			synctest.Wait()
		}
		if got := e.net.count(a1); got != 2 {
			t.Fatalf("dials = %d; a busy peer must not be idle-probed", got)
		}
		// Dies while idle: found by probes, before any client.
		e.net.set(a1, "refuse")
		time.Sleep(25 * time.Second)
		synctest.Wait()
		if p.Health().State() != peers.Dead {
			t.Fatalf("state = %v; idle probes should have found it dead", p.Health().State())
		}
	})
}

func TestAtMostOneProbeInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := health(1)
		e := setup(t, h, peers.Spec{Name: "p1", Host: "127.0.0.1", Port: 1, ConnectTimeout: 10 * time.Second})
		e.net.set(a1, "block")
		stop := e.run(t)
		defer stop()
		var wg sync.WaitGroup
		for i := 0; i < 5; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e.pr.ProbeNow(context.Background(), "p1")
			}()
		}
		wg.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()
		e.net.mu.Lock()
		max := e.net.maxAct[a1]
		e.net.mu.Unlock()
		if max != 1 {
			t.Fatalf("%d probes in flight at once; want 1", max)
		}
	})
}

func TestProbeNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, health(1), peers.Spec{Name: "p1", Host: "127.0.0.1", Port: 1})
		p, err := e.pr.ProbeNow(context.Background(), "p1")
		if err != nil || p.Health().State() != peers.Dead {
			t.Fatalf("ProbeNow = %v, %v; want the peer dead", p, err)
		}
		e.net.set(a1, "accept")
		if p, _ = e.pr.ProbeNow(context.Background(), "p1"); p.Health().State() != peers.Alive {
			t.Fatalf("state = %v; want alive", p.Health().State())
		}
		if _, err := e.pr.ProbeNow(context.Background(), "nope"); !errors.Is(err, peers.ErrUnknownPeer) {
			t.Fatalf("err = %v; want ErrUnknownPeer", err)
		}
	})
}

func TestRemovedPeerNoLongerProbed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := health(1)
		e := setup(t, h, peers.Spec{Name: "p1", Host: "127.0.0.1", Port: 1}, peers.Spec{Name: "p2", Host: "127.0.0.1", Port: 2})
		stop := e.run(t)
		defer stop()
		synctest.Wait()
		if err := e.reg.Reconcile(peers.Options{Health: h, ConnectTimeout: time.Second}, []peers.Spec{{Name: "p2", Host: "127.0.0.1", Port: 2}}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		n := e.net.count(a1)
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := e.net.count(a1); got != n {
			t.Fatalf("removed peer probed %d more times", got-n)
		}
		if e.net.count("127.0.0.1:2") < 10 {
			t.Fatal("remaining dead peer not probed")
		}
	})
}

func TestNextDelayBoundsAndSpread(t *testing.T) {
	base, max := time.Second, 5*time.Second
	if d := NextDelay(base, max, 0, 0.9); d != base {
		t.Fatalf("first delay = %v; want %v", d, base)
	}
	for _, u := range []float64{0, 0.25, 0.5, 0.999} {
		prev := base
		for i := 0; i < 20; i++ {
			d := NextDelay(base, max, prev, u)
			if d < base || d > max {
				t.Fatalf("delay %v out of [%v, %v]", d, base, max)
			}
			prev = d
		}
	}
	// Jitter spreads: from prev=2s the range is [1s, 5s].
	lo, hi := NextDelay(base, max, 2*time.Second, 0), NextDelay(base, max, 2*time.Second, 0.999)
	if lo != base || hi < 4900*time.Millisecond {
		t.Fatalf("spread [%v, %v]; want about [1s, 5s]", lo, hi)
	}
}

func TestSuspectPeerSettledByProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := health(3)
		e := setup(t, h, peers.Spec{Name: "p1", Host: "127.0.0.1", Port: 1})
		e.net.set(a1, "accept")
		stop := e.run(t)
		defer stop()
		synctest.Wait()
		p := e.reg.Get("p1")
		// Client connects that fail, while the peer itself (as probes see
		// it) may be up or down.
		d := &dialer.Dialer{Reporter: e.reg, Dial: func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("connect: connection refused")
		}}

		// A transient failure: an immediate probe clears the suspicion.
		probes := p.Health().Snapshot().ProbesTotal
		d.DialPeer(context.Background(), p, dialer.Traffic, 0)
		synctest.Wait()
		if st := p.Health().Snapshot(); p.Health().Suspect() || st.State != peers.Alive || st.ConsecutiveFailures != 0 || st.ProbesTotal != probes+1 {
			t.Fatalf("after one failed connect: %+v; want one probe that cleared it", st)
		}

		// A real outage: probes finish the count without client traffic,
		// the first at once and the next probe_interval/10 later (so a
		// restarting parent is not killed by back-to-back probes).
		e.net.set(a1, "refuse")
		d.DialPeer(context.Background(), p, dialer.Traffic, 0)
		synctest.Wait()
		if st := p.Health().Snapshot(); p.Health().State() != peers.Alive || st.ProbeFailuresTotal != 1 {
			t.Fatalf("at once: state %v, %d probe failures; want alive after one settling probe", p.Health().State(), st.ProbeFailuresTotal)
		}
		time.Sleep(h.ProbeInterval/10 - time.Millisecond)
		synctest.Wait()
		if st := p.Health().Snapshot(); st.ProbeFailuresTotal != 1 {
			t.Fatalf("%d probe failures within probe_interval/10; want the second settling probe spaced", st.ProbeFailuresTotal)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		st := p.Health().Snapshot()
		if p.Health().State() != peers.Dead || st.DeathsTotal != 1 || st.ProbeFailuresTotal != 2 {
			t.Fatalf("state %v probe failures %d; want dead after 1 traffic and 2 spaced probe failures", p.Health().State(), st.ProbeFailuresTotal)
		}
		// Then the dead schedule: the next probe only after probe_interval.
		n := st.ProbesTotal
		time.Sleep(h.ProbeInterval - time.Millisecond)
		synctest.Wait()
		if got := p.Health().Snapshot().ProbesTotal; got != n {
			t.Fatalf("%d probes within probe_interval of the death; want 0", got-n)
		}
	})
}

// TestFlappingPeerNeedsGoodProbesInARow: a peer that died flap_limit times
// within flap_window is revived only after flap_limit good probes, each
// probe_interval after the last.
func TestFlappingPeerNeedsGoodProbesInARow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := health(1)
		h.FlapLimit, h.FlapWindow = 3, 10*time.Minute
		e := setup(t, h, peers.Spec{Name: "p1", Host: "127.0.0.1", Port: 1})
		e.net.set(a1, "accept")
		stop := e.run(t)
		defer stop()
		synctest.Wait()
		p := e.reg.Get("p1")
		refuse := func() { e.reg.Observe(p, peers.Outcome{At: time.Now(), Err: errors.New("refused")}) }
		for i := 0; i < 2; i++ {
			refuse()
			time.Sleep(2 * time.Second) // the prober revives it
			synctest.Wait()
			if p.Health().State() != peers.Alive {
				t.Fatalf("death %d: not revived by the next probe", i+1)
			}
		}
		before := e.net.count(a1)
		refuse() // third death in the window: flapping
		if !p.Health().Flapping() {
			t.Fatal("not flapping after three deaths")
		}
		time.Sleep(h.ProbeInterval + 10*time.Millisecond)
		synctest.Wait()
		revivedAt := time.Time{}
		for i := 0; i < 10 && revivedAt.IsZero(); i++ {
			time.Sleep(h.ProbeInterval)
			synctest.Wait()
			if p.Health().State() == peers.Alive {
				revivedAt = time.Now()
			}
		}
		ts := e.net.times(a1)[before:]
		if len(ts) != 3 {
			t.Fatalf("%d probes until revival; want exactly 3 good ones", len(ts))
		}
		for i := 1; i < len(ts); i++ {
			if d := ts[i].Sub(ts[i-1]); d != h.ProbeInterval {
				t.Errorf("held probes %d apart; want probe_interval %v", d, h.ProbeInterval)
			}
		}
		if p.Health().Flapping() {
			t.Error("still flapping once revived")
		}
	})
}

func TestSettleDelay(t *testing.T) {
	var got []time.Duration
	for n := 1; n <= 6; n++ {
		got = append(got, settleDelay(time.Second, n))
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
	if !slices.Equal(got, want) {
		t.Fatalf("settling delays %v; want %v", got, want)
	}
}

// TestAnswerDeadRevivedByHTTPProbeOnly: a parent dead by answers is
// probed with OPTIONS and Max-Forwards: 0; a connect alone, or an answer
// of 503 or none in time, does not revive it; a complete head does.
func TestAnswerDeadRevivedByHTTPProbeOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := health(3)
		h.AnswerFailLimit = 2
		h.FirstByteTimeout = peers.FirstByteTimeout{D: 300 * time.Millisecond}
		e := setup(t, h, peers.Spec{Name: "p1", Host: "127.0.0.1", Port: 1}, peers.Spec{Name: "p2", Host: "127.0.0.1", Port: 2})
		e.net.set(a1, "accept")
		e.net.set("127.0.0.1:2", "accept")
		stop := e.run(t)
		defer stop()
		synctest.Wait()
		p := e.reg.Get("p1")
		// From now on p1 accepts connections but never answers (its HTTP
		// probes start as soon as it is suspect).
		e.net.set(a1, "http-hang")
		e.reg.Observe(p, peers.Outcome{Event: peers.Answered, Class: peers.AnswerLate, FirstByte: 0, At: time.Now()})
		e.reg.Observe(p, peers.Outcome{Event: peers.Answered, Class: peers.AnswerLate, FirstByte: 0, At: time.Now()})
		if p.Health().DeadCause() != peers.DeadByAnswer {
			t.Fatalf("p1 %v %q; want dead by answers", p.Health().State(), p.Health().DeadCause())
		}
		// Probes go on, no revival.
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if p.Health().State() != peers.Dead {
			t.Fatal("a parent that accepts but does not answer was revived")
		}
		e.net.set(a1, "http-503")
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if p.Health().State() != peers.Dead {
			t.Fatal("a parent answering 503 was revived")
		}
		e.net.set(a1, "http-ok")
		time.Sleep(h.ProbeMaxInterval + time.Second)
		synctest.Wait()
		if p.Health().State() != peers.Alive {
			t.Fatalf("p1 %v after a good HTTP probe; want alive", p.Health().State())
		}
		e.net.mu.Lock()
		probes := append([]string(nil), e.net.probes...)
		e.net.mu.Unlock()
		if len(probes) < 3 || probes[0] != "OPTIONS 0" {
			t.Fatalf("probes seen %q; want OPTIONS with Max-Forwards: 0", probes)
		}
	})
}

// TestHungSuspectProbedBackToBack: a peer whose connect timed out gets no
// live connects while it is suspect (Peer.BeginDial), so its probes come
// one after another, each waiting out its own connect timeout, and it is
// dead after connect_fail_limit of them without waiting for
// probe_interval/10 between.
func TestHungSuspectProbedBackToBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := health(3)
		h.ProbeInterval = time.Minute
		e := setup(t, h, peers.Spec{Name: "p1", Host: "127.0.0.1", Port: 1})
		e.net.set(a1, "accept")
		stop := e.run(t)
		defer stop()
		synctest.Wait()
		p := e.reg.Get("p1")
		e.net.set(a1, "block")
		d := &dialer.Dialer{Reporter: e.reg, Dial: e.net.Dial}
		start := time.Now()
		d.DialPeer(context.Background(), p, dialer.Traffic, 0) // times out: hung
		if !p.Health().Hung() || !p.Health().Suspect() {
			t.Fatalf("after a connect timeout: hung %v, suspect %v; want both", p.Health().Hung(), p.Health().Suspect())
		}
		timeout := p.ConnectTimeout()
		time.Sleep(2*timeout + timeout/2)
		synctest.Wait()
		if p.Health().State() != peers.Dead {
			t.Fatalf("%v after %v: %d probe failures; want dead after two back-to-back probes", p.Health().State(), time.Since(start), p.Health().Snapshot().ProbeFailuresTotal)
		}
	})
}
