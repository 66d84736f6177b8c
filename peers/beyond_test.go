package peers

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// unreachedAt reports that p said a request for dest never reached it,
// destFailLimit times in a row.
func unreachedAt(r *Registry, p *Peer, dest, why string, at time.Time) {
	for range destFailLimit {
		r.Observe(p, Outcome{Event: NextHopFailed, At: at, Dest: dest, Unreached: true, Detail: why})
	}
}

// TestUnreachableDestinationIsThatOneOnly: a parent that says a request
// never reached bad.test (its connect there refused) is avoided for
// bad.test alone: still alive, not suspect, no answer failure counted,
// every other destination reached through it; the mark is in its
// snapshot with its cause; a probe through it that does not reach
// bad.test leaves the mark (the next one backed off), one that does
// clears it.
func TestUnreachableDestinationIsThatOneOnly(t *testing.T) {
	r := answersRegistry(t, 3, nil)
	a := r.Get("a")
	h := a.Health()
	// Fewer than destFailLimit in a row, a complete answer for it
	// between: a flaky path, no mark.
	for range destFailLimit - 1 {
		r.Observe(a, Outcome{Event: NextHopFailed, At: t0, Dest: "http://bad.test:80", Unreached: true, Detail: "ERR_CONNECT_FAIL"})
	}
	observeAnswerFrom(r, a, AnswerOK, time.Millisecond, t0, OriginHash([]byte("bad.test")))
	r.Observe(a, Outcome{Event: NextHopFailed, At: t0, Dest: "http://bad.test:80", Unreached: true, Detail: "ERR_CONNECT_FAIL"})
	if !h.Reaches(DestHash("bad.test")) {
		t.Fatalf("marked after %d answers saying so with a complete one between; want none", destFailLimit)
	}
	unreachedAt(r, a, "http://Bad.Test:80", "ERR_CONNECT_FAIL", t0)
	if h.Reaches(DestHash("bad.test")) || !h.Reaches(DestHash("good.test")) {
		t.Fatalf("reaches bad.test %v, good.test %v; want false, true", h.Reaches(DestHash("bad.test")), h.Reaches(DestHash("good.test")))
	}
	if h.State() != Alive || h.Suspect() || !h.Eligible() || h.AnswerFailures() != 0 {
		t.Fatalf("a: %v suspect %v eligible %v, %d answer failures; want alive, healthy, eligible, none", h.State(), h.Suspect(), h.Eligible(), h.AnswerFailures())
	}
	s := h.Snapshot()
	if len(s.Unreachable) != 1 || s.Unreachable[0].Destination != "bad.test" || s.Unreachable[0].Cause != "ERR_CONNECT_FAIL" || !s.Unreachable[0].Since.Equal(t0) || s.UnreachableTotal != 1 {
		t.Fatalf("snapshot: %+v (total %d); want bad.test since t0, cause ERR_CONNECT_FAIL", s.Unreachable, s.UnreachableTotal)
	}
	if due := h.DueDestinations(t0); len(due) != 0 {
		t.Fatalf("due at once: %v; want the first probe a second later", due)
	}
	due := h.DueDestinations(t0.Add(time.Second))
	if len(due) != 1 || due[0] != "http://Bad.Test:80" {
		t.Fatalf("due after a second: %v", due)
	}
	if again := h.DueDestinations(t0.Add(time.Second)); len(again) != 0 {
		t.Fatalf("probed twice at once: %v", again)
	}
	r.Observe(a, Outcome{Event: DestProbed, Dest: due[0], Class: AnswerClosed, At: t0.Add(time.Second)})
	if h.Reaches(DestHash("bad.test")) || len(h.DueDestinations(t0.Add(2*time.Second))) != 0 || len(h.DueDestinations(t0.Add(3*time.Second))) != 1 {
		t.Fatal("a probe that did not reach it: want the mark kept and the next probe 2 s later")
	}
	r.Observe(a, Outcome{Event: DestProbed, Dest: due[0], At: t0.Add(3 * time.Second)})
	if !h.Reaches(DestHash("bad.test")) || len(h.Unreachable()) != 0 {
		t.Fatal("a probe that reached it did not clear the mark")
	}
	for _, tr := range h.History() {
		if tr.To == "dead" || tr.To == "suspect" {
			t.Fatalf("history %+v: a parent blamed for its next hop", tr)
		}
	}
}

// TestUnreachableTableIsBounded: many destinations no parent reaches
// keep maxDests marks per parent, the newest; memory stays within what
// maxDests marks take. Destinations asked once each are counted in a
// bounded table and never marked.
func TestUnreachableTableIsBounded(t *testing.T) {
	r := answersRegistry(t, 1, nil)
	a := r.Get("a")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const n = 50_000
	for i := range n {
		unreachedAt(r, a, fmt.Sprintf("http://h%d.invalid:80", i), "dns_error", t0.Add(time.Duration(i)))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	got := a.Health().Unreachable()
	if len(got) != maxDests || got[0].Destination != fmt.Sprintf("h%d.invalid", n-maxDests) || got[len(got)-1].Destination != fmt.Sprintf("h%d.invalid", n-1) {
		t.Fatalf("%d marks, from %s to %s; want the newest %d", len(got), got[0].Destination, got[len(got)-1].Destination, maxDests)
	}
	if a.Health().Reaches(DestHash("h0.invalid")) == false {
		t.Fatal("the oldest mark is still avoided")
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 1<<20 {
		t.Fatalf("the heap grew %d bytes for %d destinations; want under 1 MiB (%d marks)", grew, n, maxDests)
	}
	if a.Health().Snapshot().UnreachableTotal != n {
		t.Fatalf("total %d; want %d", a.Health().Snapshot().UnreachableTotal, n)
	}
	b := r.Get("a")
	for i := range n {
		r.Observe(b, Outcome{Event: NextHopFailed, Dest: fmt.Sprintf("http://once%d.invalid:80", i), Unreached: true, Detail: "dns_error"})
	}
	if pending := len(b.health.reach.pending); pending > maxPending {
		t.Fatalf("%d destinations counted towards a mark; want at most %d", pending, maxPending)
	}
}

// TestNoNextHopCutsOff: a parent that says it has no usable next hop at
// all (a peerd parent's no-next-hop) is cut off — alive, in its history,
// eligible for nothing — with no destination marked, and probed over
// HTTP; a probe's answer saying the same keeps it so, one saying it has
// a next hop again ends it. ICP_MISS_NOFETCH cuts off too, and only an
// ICP reply without it ends that (a Squid parent's OPTIONS answer says
// nothing of its next hop).
func TestNoNextHopCutsOff(t *testing.T) {
	r := answersRegistry(t, 2, nil)
	a := r.Get("a")
	h := a.Health()
	r.Observe(a, Outcome{Event: NextHopFailed, At: t0, Dest: "http://x.test:80", Unreached: true, NoNextHop: true, Detail: "destination_unavailable"})
	if h.Eligible() || !h.NoNextHop() || h.State() != Alive || h.Suspect() || h.ProbeKind() != "http" || len(h.Unreachable()) != 0 {
		t.Fatalf("a: eligible %v, cut off %v, %v, suspect %v, probe %s, marks %v; want cut off, alive, probed over HTTP, no mark",
			h.Eligible(), h.NoNextHop(), h.State(), h.Suspect(), h.ProbeKind(), h.Unreachable())
	}
	if last := h.History()[len(h.History())-1]; last.To != "no_next_hop" || last.Cause != CauseNextHop {
		t.Fatalf("history %+v; want to no_next_hop, cause next_hop", last)
	}
	r.Observe(a, Outcome{Event: HTTPProbed, At: t0, NoNextHop: true})
	if !h.NoNextHop() {
		t.Fatal("a probe answer saying no next hop ended the cut-off")
	}
	r.Observe(a, Outcome{Event: HTTPProbed, At: t0})
	if h.NoNextHop() || !h.Eligible() {
		t.Fatal("a probe answer with a next hop did not end the cut-off")
	}

	b := r.Get("b")
	r.Observe(b, Outcome{Event: ICPReplied, At: t0, NoNextHop: true})
	if !b.Health().NoNextHop() || b.Health().ProbeKind() != "tcp" {
		t.Fatalf("after ICP_MISS_NOFETCH: cut off %v, probe %s; want cut off, no HTTP probe to settle it", b.Health().NoNextHop(), b.Health().ProbeKind())
	}
	r.Observe(b, Outcome{Event: HTTPProbed, At: t0})
	if !b.Health().NoNextHop() {
		t.Fatal("an OPTIONS answer ended an ICP cut-off")
	}
	r.Observe(b, Outcome{Event: ICPReplied, At: t0})
	if b.Health().NoNextHop() {
		t.Fatal("an ICP MISS did not end the ICP cut-off")
	}
}
