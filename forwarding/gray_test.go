package forwarding

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/peerd/peerd/peers"
)

// Gray failures in the engine, under synctest with scripted parents: a
// parent whose head is late is hedged to the next hop and judged late only
// when the hedge was fast; its own 5xx is retried; a POST is never
// hedged; the judged classes reach the registry.

func grayRig(t *testing.T) *rig {
	return newRigWith(t, HedgeDelay{}, func(h *peers.Config) {
		h.AnswerFailLimit = 3
		h.FirstByteTimeout = peers.FirstByteTimeout{D: 300 * time.Millisecond}
		h.HedgeRequests = true
		h.MaxAnswerDead = 1
	})
}

func TestLateHeadIsHedgedAndJudged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := grayRig(t)
		r.net.answerDelay[addrA] = time.Hour // accepts, never answers
		rec, took := r.get(t, "GET")
		if rec.Code != 200 || rec.body != "from "+addrB || took != 300*time.Millisecond {
			t.Fatalf("%d %q after %v; want b's answer after the 300ms first-byte timeout", rec.Code, rec.body, took)
		}
		a := r.reg.Get("a")
		if got := a.Health().Snapshot().AnswerFailuresByClass["late"]; got != 1 || !a.Health().Suspect() || a.Health().Snapshot().Hedged != 1 {
			t.Fatalf("a: late %d, suspect %v, hedged %d; want one late answer, suspect, one hedge", got, a.Health().Suspect(), a.Health().Snapshot().Hedged)
		}
		// Suspect: the next request goes to b first, at once.
		if rec, took := r.get(t, "GET"); rec.body != "from "+addrB || took != 0 {
			t.Fatalf("%q after %v; want b at once", rec.body, took)
		}
	})
}

// TestLateHeadOnReusedConnectionIsHedgedOnTime: a pooled connection
// keeps the deadline of its last request when it is close enough to the
// next one's first-byte timeout (deadlines.readBy), so the wait may end a
// little early; the hedge still starts at the timeout exactly.
func TestLateHeadOnReusedConnectionIsHedgedOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := grayRig(t)
		if rec, took := r.get(t, "GET"); rec.body != "from "+addrA || took != 0 {
			t.Fatalf("%q after %v; want a at once", rec.body, took)
		}
		time.Sleep(10 * time.Millisecond) // within an eighth of the 300ms timeout
		r.net.answerDelay[addrA] = time.Hour
		rec, took := r.get(t, "GET")
		if rec.body != "from "+addrB || took != 300*time.Millisecond {
			t.Fatalf("%q after %v; want b's answer after the 300ms first-byte timeout", rec.body, took)
		}
		if got := r.net.get(r.net.dials, addrA); got != 1 {
			t.Fatalf("%d connects to a; want 1 (the second request on the pooled connection)", got)
		}
	})
}

func TestLateWithoutFasterHedgeIsNoFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := grayRig(t)
		// The origin is slow behind both parents alike.
		r.net.answerDelay[addrA] = time.Second
		r.net.answerDelay[addrB] = time.Second
		rec, took := r.get(t, "GET")
		if rec.body != "from "+addrA || took != time.Second {
			t.Fatalf("%q after %v; want a's own answer at 1s (it began first)", rec.body, took)
		}
		for _, n := range []string{"a", "b"} {
			p := r.reg.Get(n)
			if late := p.Health().Snapshot().AnswerFailuresByClass["late"]; late != 0 || p.Health().Suspect() {
				t.Fatalf("%s: late %d, suspect %v; a slow origin is no parent's fault", n, late, p.Health().Suspect())
			}
		}
		// The hedge's connection was closed, never reused: b got one
		// request and its answer was not read.
		if got := r.net.get(r.net.requests, addrB); got != 1 {
			t.Fatalf("b got %d requests; want the one hedge", got)
		}
	})
}

func TestPostIsNeverHedged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := grayRig(t)
		r.net.answerDelay[addrA] = time.Second
		rec, took := r.get(t, "POST")
		if rec.body != "from "+addrA || took != time.Second {
			t.Fatalf("%q after %v; want a's answer after 1s", rec.body, took)
		}
		if n := r.net.get(r.net.dials, addrB); n != 0 {
			t.Fatalf("b dialled %d times for a POST", n)
		}
		if late := r.reg.Get("a").Health().Snapshot().AnswerFailuresByClass["late"]; late != 0 {
			t.Fatal("a POST's late answer was judged without a hedge")
		}
	})
}

func TestOwn5xxRetriedAndJudged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := grayRig(t)
		r.net.status[addrA] = 503
		r.net.fields[addrA] = "Proxy-Status: a; error=proxy_internal_error\r\n"
		rec, _ := r.get(t, "GET")
		if rec.Code != 200 || rec.body != "from "+addrB {
			t.Fatalf("%d %q; want b's 200 (a's own 503 retried)", rec.Code, rec.body)
		}
		if n := r.reg.Get("a").Health().Snapshot().AnswerFailuresByClass["own_5xx"]; n != 1 {
			t.Fatalf("own_5xx = %d; want 1", n)
		}
		// A 502 a parent reports about its origin is not its failure:
		// one that says the request never reached the origin goes on to
		// the next parent; one that refused the request is the answer.
		r2 := grayRig(t)
		r2.net.status[addrA] = 502
		r2.net.fields[addrA] = "Proxy-Status: a; error=destination_not_found\r\n"
		rec, _ = r2.get(t, "GET")
		if rec.Code != 200 || rec.body != "from "+addrB {
			t.Fatalf("%d %q; want b's 200 (nothing reached the origin through a)", rec.Code, rec.body)
		}
		if n := r2.reg.Get("a").Health().AnswerFailures(); n != 0 {
			t.Fatalf("answer failures %d for an origin's fault", n)
		}
		r3 := grayRig(t)
		r3.net.status[addrA] = 502
		r3.net.fields[addrA] = "Proxy-Status: a; error=http_request_denied\r\n"
		rec, _ = r3.get(t, "GET")
		if rec.Code != 502 {
			t.Fatalf("%d; want the parent's refusal relayed", rec.Code)
		}
		if n := r3.reg.Get("a").Health().AnswerFailures(); n != 0 {
			t.Fatalf("answer failures %d for a refusal", n)
		}
	})
}

func TestDeathByAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := grayRig(t)
		a := r.reg.Get("a")
		r.net.answerDelay[addrA] = time.Hour
		for i := 0; i < 3; i++ {
			// Each request is made to a alone first (first-up puts a
			// suspect a behind b, so make b unusable for the plan's head).
			r.reg.Observe(a, peers.Outcome{Event: peers.Answered, Class: peers.AnswerLate, FirstByte: 0, At: time.Now()})
		}
		if a.Health().State() != peers.Dead || a.Health().DeadCause() != peers.DeadByAnswer || a.Health().ProbeKind() != "http" {
			t.Fatalf("a: %v cause %q probe %q; want dead by answers, probed over HTTP", a.Health().State(), a.Health().DeadCause(), a.Health().ProbeKind())
		}
		if rec, _ := r.get(t, "GET"); rec.body != "from "+addrB {
			t.Fatalf("%q; a dead parent got traffic", rec.body)
		}
	})
}

func TestClosedAnswerJudged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := grayRig(t)
		r.net.status[addrA] = -1 // reads the request, closes without a word
		rec, _ := r.get(t, "GET")
		if rec.Code != 200 || rec.body != "from "+addrB {
			t.Fatalf("%d %q; want b's answer (a GET retried)", rec.Code, rec.body)
		}
		if n := r.reg.Get("a").Health().Snapshot().AnswerFailuresByClass["closed"]; n != 1 {
			t.Fatalf("closed = %d; want 1", n)
		}
	})
}

func TestNoHedgeOnceAByteReachedTheClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := grayRig(t)
		r.net.status[addrA] = -103 // 103 Early Hints at once, the rest late
		r.net.answerDelay[addrA] = time.Second
		rec, took := r.get(t, "GET")
		if rec.body != "from "+addrA || took != time.Second {
			t.Fatalf("%q after %v; want a's answer after 1s: a 1xx went out, nothing may be redone", rec.body, took)
		}
		if n := r.net.get(r.net.dials, addrB); n != 0 {
			t.Fatalf("b dialled %d times after a byte reached the client", n)
		}
	})
}

// noBudgetRig is grayRig with hedge_budget "0": no hedge is allowed.
func noBudgetRig(t *testing.T) *rig {
	return newRigWith(t, HedgeDelay{}, func(h *peers.Config) {
		h.AnswerFailLimit = 3
		h.FirstByteTimeout = peers.FirstByteTimeout{D: 300 * time.Millisecond}
		h.HedgeRequests = true
		h.HedgeBudget = 0
		h.MaxAnswerDead = 1
	})
}

// TestLateUnhedgedParentIsSuspect: with no hedge budget left, a late
// head still makes its parent suspect (cause late_answer, no failure
// counted), so the next request goes to the healthy parent at once; the
// late request itself gets its parent's answer.
func TestLateUnhedgedParentIsSuspect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := noBudgetRig(t)
		r.net.answerDelay[addrA] = time.Second
		rec, took := r.get(t, "GET")
		if rec.body != "from "+addrA || took != time.Second {
			t.Fatalf("%q after %v; want a's own answer at 1s (not hedged: no budget)", rec.body, took)
		}
		a := r.reg.Get("a")
		h := a.Health().History()
		if !a.Health().Suspect() || len(h) == 0 || h[len(h)-1].Cause != peers.CauseLateAnswer {
			t.Fatalf("a: suspect %v, history %+v; want suspect with cause late_answer", a.Health().Suspect(), h)
		}
		if late := a.Health().Snapshot().AnswerFailuresByClass["late"]; late != 0 {
			t.Fatalf("a: %d late failures; an unhedged late head proves nothing", late)
		}
		if rec, took := r.get(t, "GET"); rec.body != "from "+addrB || took != 0 {
			t.Fatalf("%q after %v; want b at once", rec.body, took)
		}
	})
}

// TestLateWaitOnDeadParentGivesUp: a GET waiting on a late parent that is
// declared dead meanwhile (its answers and probes failed elsewhere) stops
// waiting within a quarter second and goes to the next parent.
func TestLateWaitOnDeadParentGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := noBudgetRig(t)
		r.net.answerDelay[addrA] = time.Hour
		a := r.reg.Get("a")
		go func() {
			time.Sleep(2 * time.Second)
			for i := 0; i < 3; i++ {
				r.reg.Observe(a, peers.Outcome{Event: peers.Answered, Class: peers.AnswerTimeout, FirstByte: 0, At: time.Now()})
			}
		}()
		rec, took := r.get(t, "GET")
		if a.Health().State() != peers.Dead {
			t.Fatalf("a is %v; want dead by answers", a.Health().State())
		}
		if rec.body != "from "+addrB || took > 2*time.Second+lateCheck {
			t.Fatalf("%q after %v; want b's answer within %v of a's death at 2s", rec.body, took, lateCheck)
		}
	})
}

// TestHedgeWinnerKeepsItsBody: the hedge's body comes after its head (a
// segment of its own); the race that the hedge won must not close the
// winner's connection, or the client gets a whole head and no body.
func TestHedgeWinnerKeepsItsBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := grayRig(t)
		r.net.answerDelay[addrA] = time.Hour
		r.net.bodyAfter[addrB] = time.Millisecond
		rec, _ := r.get(t, "GET")
		if rec.Code != 200 || rec.body != "from "+addrB {
			t.Fatalf("%d %q; want b's whole answer", rec.Code, rec.body)
		}
	})
}

// TestHungParentIsNoTailToBudget: a parent that accepts and hangs, with
// several requests waiting on it at once. The hedge budget covers the
// first; the rest, refused by the budget, are hedged all the same once
// the parent has failed an answer (a parent that stopped answering is no
// tail), so none waits a second and the parent dies of its answers.
func TestHungParentIsNoTailToBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := grayRig(t)
		r.net.answerDelay[addrA] = time.Hour
		const n = 4
		took := make(chan time.Duration, n)
		for range n {
			go func() {
				rec, d := r.get(t, "GET")
				if rec.body != "from "+addrB {
					t.Errorf("%q; want b's answer (after %v)", rec.body, d)
				}
				took <- d
			}()
		}
		for range n {
			if d := <-took; d >= time.Second {
				t.Fatalf("a request took %v; want under a second", d)
			}
		}
		if a := r.reg.Get("a"); a.Health().State() != peers.Dead {
			t.Fatalf("a is %v after %d late answers; want dead by answers", a.Health().State(), a.Health().AnswerFailures())
		}
	})
}
