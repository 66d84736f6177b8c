package peers

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
)

func TestFailuresByClass(t *testing.T) {
	r, _ := newTestRegistry(t, 100, parent("p1", 1))
	p := r.Get("p1")
	for _, err := range []error{
		&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)},
		&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)},
		&net.OpError{Op: "dial", Err: os.ErrDeadlineExceeded},
		fmt.Errorf("dial: %w", context.DeadlineExceeded),
		&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)},
		&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)},
		&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ENETUNREACH)},
		&net.DNSError{Err: "no such host", Name: "nope.invalid", IsNotFound: true},
		x509.UnknownAuthorityError{},
	} {
		r.Observe(p, Outcome{At: t0, Err: err})
	}
	want := map[string]int64{"refused": 2, "timeout": 2, "reset": 1, "unreachable": 2, "dns": 1, "tls": 1}
	got := p.Health().Snapshot().FailuresByClass
	for k, v := range want {
		if got[k] != v {
			t.Errorf("failures_by_class[%s] = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
}

func TestHistoryRecordsCauses(t *testing.T) {
	r, _ := newTestRegistry(t, 1, parent("p1", 1))
	p := r.Get("p1")
	succeed(r, p, true) // unknown -> alive, by probe
	fail(r, p, false)   // alive -> dead, by connect failures
	succeed(r, p, true) // dead -> alive, by probe
	if _, _, err := r.SetAdmin("p1", Drain, "kernel upgrade", 0); err != nil {
		t.Fatal(err)
	}
	h := p.Health().History()
	want := []struct{ from, to, cause string }{
		{"unknown", "alive", CauseProbe}, {"alive", "dead", CauseConnectFailures}, {"dead", "alive", CauseProbe}, {"enabled", "drain", CauseAdmin},
	}
	if len(h) != len(want) {
		t.Fatalf("history %+v; want %d entries", h, len(want))
	}
	for i, w := range want {
		if h[i].From != w.from || h[i].To != w.to || h[i].Cause != w.cause {
			t.Errorf("history[%d] = %+v; want %s -> %s by %s", i, h[i], w.from, w.to, w.cause)
		}
	}
	if h[1].Error == "" || h[3].Error != "kernel upgrade" {
		t.Errorf("history lacks the error or the reason: %+v", h)
	}
	for range 100 {
		fail(r, p, false)
		succeed(r, p, true)
	}
	if n := len(p.Health().History()); n != historyLen {
		t.Fatalf("history holds %d entries; want the last %d", n, historyLen)
	}
}

// An admin state set with a ttl returns to enabled by itself, logged and
// in the history; one replaced meanwhile does not.
func TestAdminTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log, hook := test.NewNullLogger()
		r, err := New(Options{Health: DefaultConfig(), ConnectTimeout: time.Second, Log: log}, []Spec{parent("p1", 1), parent("p2", 2)})
		if err != nil {
			t.Fatal(err)
		}
		p, from, err := r.SetAdmin("p1", Drain, "kernel upgrade", 30*time.Minute)
		if err != nil || from != Enabled {
			t.Fatalf("SetAdmin: %v from %v", err, from)
		}
		if p.Health().Snapshot().AdminReason != "kernel upgrade" || p.Health().Snapshot().AdminUntil.IsZero() {
			t.Fatalf("reason %q until %v", p.Health().Snapshot().AdminReason, p.Health().Snapshot().AdminUntil)
		}
		r.SetAdmin("p2", Maintenance, "first", 10*time.Minute)
		r.SetAdmin("p2", Maintenance, "second, longer", time.Hour) // replaces the first ttl
		time.Sleep(29 * time.Minute)
		synctest.Wait()
		if p.Health().AdminState() != Drain {
			t.Fatal("the override ended early")
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if p.Health().AdminState() != Enabled || p.Health().Snapshot().AdminReason != "" || !p.Health().Snapshot().AdminUntil.IsZero() {
			t.Fatalf("after the ttl: %v %q %v; want enabled", p.Health().AdminState(), p.Health().Snapshot().AdminReason, p.Health().Snapshot().AdminUntil)
		}
		if last := p.Health().History()[len(p.Health().History())-1]; last.To != "enabled" || last.Cause != CauseAdmin {
			t.Fatalf("history ends %+v", last)
		}
		if got := r.Get("p2").Health().AdminState(); got != Maintenance {
			t.Fatalf("p2 = %v at 31m; the replaced 10m ttl must not end it", got)
		}
		found := false
		for _, e := range hook.AllEntries() {
			if e.Data["peer"] == "p1" && e.Data["to"] == "enabled" {
				found = true
			}
		}
		if !found {
			t.Fatal("the end of the ttl was not logged")
		}
	})
}

// Flap damping: the flap_limit-th death within flap_window holds the
// revival until flap_limit consecutive good probes; a failed probe starts
// the run over.
func TestFlapDamping(t *testing.T) {
	r, _ := newTestRegistry(t, 1, parent("p1", 1))
	p := r.Get("p1")
	succeed(r, p, true)
	for i := 0; i < 2; i++ {
		fail(r, p, false)
		succeed(r, p, true)
		if p.Health().State() != Alive || p.Health().Flapping() {
			t.Fatalf("death %d: %v flapping=%v; want revived at once", i+1, p.Health().State(), p.Health().Flapping())
		}
	}
	fail(r, p, false) // the third death within the window
	if !p.Health().Flapping() {
		t.Fatal("three deaths in flap_window: not flapping")
	}
	succeed(r, p, true)
	succeed(r, p, true)
	if p.Health().State() != Dead || p.Health().HeldProbes() != 2 {
		t.Fatalf("after 2 good probes: %v held %d; want dead, 2 held", p.Health().State(), p.Health().HeldProbes())
	}
	fail(r, p, true) // the run starts over
	if p.Health().HeldProbes() != 0 || !p.Health().Flapping() {
		t.Fatalf("after a failed probe: held %d flapping %v", p.Health().HeldProbes(), p.Health().Flapping())
	}
	for i := 0; i < 3; i++ {
		if p.Health().State() != Dead {
			t.Fatalf("revived after %d good probes; want 3", i)
		}
		succeed(r, p, true)
	}
	if p.Health().State() != Alive || p.Health().Flapping() {
		t.Fatalf("after 3 good probes: %v flapping=%v; want alive", p.Health().State(), p.Health().Flapping())
	}
	holds := 0
	for _, h := range p.Health().History() {
		if h.Cause == CauseFlapHold {
			holds++
		}
	}
	if holds != 4 {
		t.Fatalf("%d flap_hold entries in the history; want 4 (2 + 2 held probes)", holds)
	}
	// Deaths outside the window do not count.
	r2, _ := newTestRegistry(t, 1, parent("p2", 2))
	q := r2.Get("p2")
	at := t0
	for i := 0; i < 5; i++ {
		r2.Observe(q, Outcome{At: at, Probe: true})
		at = at.Add(11 * time.Minute)
		r2.Observe(q, Outcome{At: at, Err: errRefused})
	}
	if q.Health().Flapping() {
		t.Fatal("deaths 11 minutes apart flap with a 10-minute window")
	}
}

// Slow start ramps a revived parent from 10% to 100% of its weight.
func TestRamp(t *testing.T) {
	log, _ := test.NewNullLogger()
	h := DefaultConfig()
	h.ConnectFailLimit, h.SlowStart = 1, 100*time.Second
	r, err := New(Options{Health: h, ConnectTimeout: time.Second, Log: log}, []Spec{parent("p1", 1)})
	if err != nil {
		t.Fatal(err)
	}
	p := r.Get("p1")
	r.Observe(p, Outcome{At: t0, Probe: true})
	if p.Health().Ramping() {
		t.Fatal("the first verdict is not a revival: no slow start")
	}
	r.Observe(p, Outcome{At: t0, Err: errRefused})
	r.Observe(p, Outcome{At: t0, Probe: true})
	for _, c := range []struct {
		at   time.Duration
		want float64
	}{{0, 0.1}, {50 * time.Second, 0.55}, {100 * time.Second, 1}, {time.Hour, 1}} {
		if got := p.Health().Ramp(t0.Add(c.at)); got < c.want-0.001 || got > c.want+0.001 {
			t.Errorf("ramp at %v = %.3f; want %.3f", c.at, got, c.want)
		}
	}
	if p.Health().Ramping() {
		t.Error("still ramping after slow_start")
	}
}

// A suspicion from outside (a fleet member's verdict) turns an alive peer
// suspect without killing it; its own probe settles it, and neither a
// dead nor an unknown peer is touched (revival is never taken from it).
func TestSuspectFromOutside(t *testing.T) {
	r, _ := newTestRegistry(t, 3, parent("p1", 1), parent("p2", 2))
	p1, p2 := r.Get("p1"), r.Get("p2")
	if suspectBy(r, p1, CauseFleet, "node-a reported dead") {
		t.Fatal("an unknown peer turned suspect")
	}
	succeed(r, p1, true)
	watch := r.Watch()
	if !suspectBy(r, p1, CauseFleet, "node-a reported dead") {
		t.Fatal("an alive peer did not turn suspect")
	}
	select {
	case <-watch:
	default:
		t.Fatal("the suspicion did not wake watchers (the prober would not probe now)")
	}
	if p1.Health().State() != Alive || !p1.Health().Suspect() || p1.Health().Eligible() != true {
		t.Fatalf("p1 state %v suspect %v eligible %v; want alive, suspect, eligible behind healthy peers", p1.Health().State(), p1.Health().Suspect(), p1.Health().Eligible())
	}
	if suspectBy(r, p1, CauseFleet, "again") {
		t.Error("an already suspect peer was suspected twice")
	}
	succeed(r, p1, true) // its own probe connects
	if p1.Health().Suspect() {
		t.Fatal("a good probe did not clear the suspicion")
	}
	h := p1.Health().History()
	if n := len(h); n < 2 || h[n-2].Cause != CauseFleet || h[n-2].To != "suspect" || h[n-1].Cause != CauseProbe || h[n-1].From != "suspect" {
		t.Fatalf("history %+v; want alive->suspect by fleet, then suspect->alive by probe", h)
	}

	// A dead peer stays dead: gossip never revives nor re-kills.
	succeed(r, p2, true)
	for range 3 {
		fail(r, p2, false)
	}
	if p2.Health().State() != Dead {
		t.Fatalf("p2 %v; want dead", p2.Health().State())
	}
	if suspectBy(r, p2, CauseFleet, "node-a reported dead") || p2.Health().State() != Dead {
		t.Fatal("a dead peer was changed by an outside suspicion")
	}

	// A suspected peer whose probes fail dies by its own connects.
	suspectBy(r, p1, CauseFleet, "node-a reported dead")
	for range 3 {
		fail(r, p1, true)
	}
	if p1.Health().State() != Dead {
		t.Fatalf("p1 %v after 3 failed probes while suspect; want dead", p1.Health().State())
	}
}

// A change is in the peer's history before anyone can see it. The prober
// settles a fleet suspicion the moment it sees it: were the suspicion
// written to the history after it became visible, the probe's "settled"
// entry could come first and the history would end with a suspect peer
// that is healthy (seen in the end-to-end fleet test on a loaded machine).
// Holding a feed's lock stops each writer after its change is visible and
// before it returns, where the old code had not yet written the history.
func TestHistoryWrittenBeforeChangeIsSeen(t *testing.T) {
	r, _ := newTestRegistry(t, 3, parent("p1", 1))
	p := r.Get("p1")
	succeed(r, p, true)
	feed := r.Subscribe()
	feed.Take()
	last := func() Transition { h := p.Health().History(); return h[len(h)-1] }
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			runtime.Gosched()
		}
	}

	feed.mu.Lock()
	done := make(chan struct{})
	go func() { suspectBy(r, p, CauseFleet, "node-a reported p1 dead"); close(done) }()
	wait("p1 suspect", p.Health().Suspect)
	if h := last(); h.To != "suspect" || h.Cause != CauseFleet {
		t.Errorf("p1 is suspect, but its history ends with %+v", h)
	}
	feed.mu.Unlock()
	<-done

	feed.mu.Lock()
	done = make(chan struct{})
	go func() { succeed(r, p, true); close(done) }()
	wait("p1 settled", func() bool { return !p.Health().Suspect() })
	if h := last(); h.From != "suspect" || h.To != "alive" || h.Cause != CauseProbe {
		t.Errorf("p1's own probe settled it, but its history ends with %+v", h)
	}
	feed.mu.Unlock()
	<-done

	// A death by connects (the first two failures, which make it
	// suspect, before the lock), and the revival.
	fail(r, p, false)
	fail(r, p, false)
	feed.Take()
	for _, step := range []struct {
		to  State
		act func()
	}{{Dead, func() { fail(r, p, false) }}, {Alive, func() { succeed(r, p, true) }}} {
		feed.mu.Lock()
		done = make(chan struct{})
		go func() { step.act(); close(done) }()
		wait("p1 "+step.to.String(), func() bool { return p.Health().State() == step.to })
		if h := last(); h.To != step.to.String() {
			t.Errorf("p1 is %v, but its history ends with %+v", step.to, h)
		}
		feed.mu.Unlock()
		<-done
	}
}

// TestOwnSuspicionsRecorded: a failed connect below the limit, a slow
// connect and the connect that settles them are in the peer's history
// with their causes and logged at info level; a peer that flips at the
// rate of its requests logs at most one line per 10 s.
func TestOwnSuspicionsRecorded(t *testing.T) {
	r, hook := newTestRegistry(t, 3, parent("p1", 1))
	p1 := r.Get("p1")
	succeed(r, p1, true)
	fail(r, p1, false)
	succeed(r, p1, false)
	r.Observe(p1, Outcome{Event: ConnectSlow})
	succeed(r, p1, true)
	h := p1.Health().History()
	var got []string
	for _, tr := range h[len(h)-4:] {
		got = append(got, tr.From+">"+tr.To+" "+tr.Cause)
	}
	want := "[alive>suspect connect_failures suspect>alive connect alive>suspect slow_connect suspect>alive probe]"
	if fmt.Sprint(got) != want {
		t.Fatalf("history %v; want %s", got, want)
	}
	var infos []string
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.InfoLevel && strings.Contains(e.Message, "suspect") {
			infos = append(infos, e.Message)
		}
	}
	if len(infos) != 1 || !strings.Contains(infos[0], "Parent p1 is suspect: connect failed (1 of 3 before dead)") {
		t.Fatalf("info lines %q; want the first suspicion only (the rest within 10 s are counted)", infos)
	}
}
