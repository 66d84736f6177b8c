package peers

import (
	"context"
	"testing"
)

// TestLiveConnectGate: which live connects BeginDial lets a request make.
// A refused one costs the request nothing (it goes on to its next hop);
// an allowed one to a peer that hangs costs it the connect timeout.
func TestLiveConnectGate(t *testing.T) {
	r, _ := newTestRegistry(t, 3, parent("p1", 1))
	p := r.Get("p1")
	if p.Health().BeginDial() {
		t.Fatal("an unknown peer was dialled by a live request; only a probe gives its first verdict")
	}
	succeed(r, p, true)

	// Healthy: any number at once.
	for i := range 2 {
		if !p.Health().BeginDial() {
			t.Fatalf("a healthy peer was refused live connect %d", i+1)
		}
	}
	p.Health().EndDial()
	p.Health().EndDial()

	// Suspect by a refused connect: one live connect at a time.
	fail(r, p, false)
	if !p.Health().BeginDial() {
		t.Fatal("a suspect peer with no connect pending was refused")
	}
	if p.Health().BeginDial() {
		t.Fatal("a second live connect to a suspect peer was allowed beside the first")
	}
	p.Health().EndDial()

	// Suspect by a connect that timed out: none until a connect succeeds.
	r.Observe(p, Outcome{At: t0, Err: context.DeadlineExceeded})
	if p.Health().BeginDial() {
		t.Fatal("a live request was let wait on a peer whose latest connect hung")
	}

	// Dead (a probe found it so after a plan handed it out): never.
	fail(r, p, true)
	if p.Health().State() != Dead {
		t.Fatalf("state = %v after 3 failures; want dead", p.Health().State())
	}
	if p.Health().BeginDial() {
		t.Fatal("a dead peer was dialled by a live request; only probes may revive it")
	}
	succeed(r, p, false) // a connect made before the death, ending late
	if p.Health().BeginDial() {
		t.Fatal("a late traffic success let live requests dial a dead peer")
	}

	// Revived by a probe: healthy again, and the gate is open.
	succeed(r, p, true)
	if p.Health().State() != Alive || !p.Health().BeginDial() {
		t.Fatalf("state = %v after a successful probe, and refused; want alive and dialled", p.Health().State())
	}
	p.Health().EndDial()
}
