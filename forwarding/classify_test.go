package forwarding

import (
	"errors"
	"os"
	"testing"

	"github.com/peerd/peerd/internal/match"
)

// TestClassify: the class of a failure follows from how far the attempt
// got, recorded where each step happened, never from the error's text.
func TestClassify(t *testing.T) {
	plain := errors.New("connection reset by peer")
	timeout := os.ErrDeadlineExceeded
	for _, tc := range []struct {
		name string
		a    attempt
		st   bool // status in retry_on_status
		want failure
	}{
		{"dial failed", attempt{progress: dialling, err: plain}, false, connectFailed},
		{"dial timed out", attempt{progress: dialling, err: timeout}, false, connectFailed},
		{"no head written", attempt{progress: connected, err: plain}, false, beforeWrite},
		{"written, then reset", attempt{progress: headWritten, err: plain}, false, afterWrite},
		{"body written, then reset", attempt{progress: bodyWritten, err: plain}, false, afterWrite},
		{"written, no answer in time", attempt{progress: headWritten, err: timeout, timedOut: true}, false, timedOut},
		{"half a head, then nothing in time", attempt{progress: headWritten, err: timeout, gotBytes: true}, false, afterWrite},
		{"pooled, peer had closed", attempt{progress: headWritten, reused: true, err: plain}, false, staleConn},
		{"pooled, write failed", attempt{progress: connected, reused: true, err: plain}, false, staleConn},
		{"pooled, half a head", attempt{progress: headWritten, reused: true, err: plain, gotBytes: true}, false, afterWrite},
		{"pooled, silent", attempt{progress: headWritten, reused: true, err: timeout, timedOut: true}, false, timedOut},
		{"a message that mentions dial", attempt{progress: headWritten, err: errors.New("dial tcp: refused")}, false, afterWrite},
		{"final answer", attempt{progress: responseHead, final: true, status: 200}, false, notFailed},
		{"final answer to retry", attempt{progress: responseHead, final: true, status: 502}, true, statusRetry},
		{"final answer after a 1xx", attempt{progress: sentToClient, final: true, status: 502}, true, notFailed},
		{"broke after a 1xx", attempt{progress: sentToClient, err: plain}, false, committed},
		{"client body broke", attempt{progress: headWritten, err: errClientBody, clientBody: true}, false, committed},
		{"written, no byte by the first-byte timeout", attempt{progress: headWritten, late: true}, false, lateHead},
		{"late, then a head", attempt{progress: responseHead, final: true, status: 200}, false, notFailed},
		{"late wait on a parent found dead", attempt{progress: headWritten, wasLate: true, err: errGivenUp, timedOut: true}, false, givenUp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.a.role = peerRole{} // DIRECT's
			if got := tc.a.class(tc.st); got != tc.want {
				t.Fatalf("class = %s; want %s", got, tc.want)
			}
		})
	}
}

// leftOf is a plan with some hop left (any), a healthy one among them
// (healthy), or none.
type leftOf struct{ any, healthy bool }

func (l leftOf) Left(healthy bool) bool { return l.any && (!healthy || l.healthy) }

// TestDecide: the one decision that follows every attempt, written out
// case by case (what an operator would say, not the code's own switch):
// the next-hop situations — a connect that failed, a sibling's miss, a
// status retry, a CONNECT that broke or was refused — and each fact it
// reads: the retry budget (and a withdrawal that found it spent), a lead
// hop (the fleet's owner, whose failure is no retry), whether the plan
// has a hop left, and for a late head whether a healthy one is left.
func TestDecide(t *testing.T) {
	get := facts{idempotent: true, replayable: true}
	get504 := facts{idempotent: true, replayable: true, retry504: true}
	streamedPut := facts{idempotent: true}
	post := facts{replayable: true}
	connect := facts{tunnel: true}
	hedgeable := facts{idempotent: true, replayable: true, hedgeable: true}
	more := leftOf{any: true, healthy: true} // a healthy hop left
	onlySuspect := leftOf{any: true}         // hops left, all suspect
	nothing := leftOf{}                      // no hop left
	budget := func(l leftOf) step { return step{budget: granted(true), left: l} }
	spent := func(l leftOf) step { return step{budget: granted(false), left: l} }
	lead := func(l leftOf) step { return step{lead: true, budget: granted(false), left: l} } // budget spent, but a lead hop spends none
	for _, tc := range []struct {
		name string
		c    failure
		f    facts
		s    step
		want verdict
	}{
		// A connect that failed: nothing was sent; always the next hop,
		// whatever the method, and for free; none left: no answer.
		{"connect failed, GET", connectFailed, get, budget(more), nextHop},
		{"connect failed, POST, no budget", connectFailed, post, spent(more), nextHop},
		{"connect failed, CONNECT", connectFailed, connect, spent(more), nextHop},
		{"connect failed, nothing left", connectFailed, get, budget(nothing), none},
		{"head not written, POST", beforeWrite, post, spent(more), nextHop},
		{"head not written, nothing left", beforeWrite, post, budget(nothing), answer},
		// A sibling's miss is no failure: the next hop, any budget; with
		// nothing after it, no answer (never the sibling's 504).
		{"sibling miss", siblingMissed, get, spent(more), nextHop},
		{"sibling miss, POST", siblingMissed, post, spent(more), nextHop},
		{"sibling miss, nothing left", siblingMissed, get, budget(nothing), none},
		// A peer at max_conn is skipped, not failed: nothing was sent.
		{"peer full, GET", peerFull, get, spent(more), nextHop},
		{"peer full, POST", peerFull, post, spent(more), nextHop},
		{"peer full, CONNECT", peerFull, connect, spent(more), nextHop},
		{"peer full, nothing left", peerFull, get, spent(nothing), none},
		// A late head: hedged to a healthy hop when the request may be
		// sent twice and the budget allows; refused the budget with a
		// healthy hop there, the parent is suspect while the wait goes on;
		// otherwise the wait goes on (never an answer).
		{"late head, hedgeable GET", lateHead, hedgeable, budget(more), hedge},
		{"late head, budget spent", lateHead, hedgeable, spent(more), waitSuspect},
		{"late head, budget spent, only suspect hops", lateHead, hedgeable, spent(onlySuspect), waitOn},
		{"late head, no healthy hop", lateHead, hedgeable, budget(onlySuspect), waitOn},
		{"late head, POST", lateHead, post, budget(more), waitOn},
		{"late head, POST, budget spent", lateHead, post, spent(more), waitSuspect},
		{"late head, streamed body", lateHead, streamedPut, budget(more), waitOn},
		// A status in retry_on_status: idempotent and replayable, within
		// the budget (a retry: it spends it).
		{"status retry, GET", statusRetry, get, budget(more), retry},
		{"status retry, GET, budget spent", statusRetry, get, spent(more), answer},
		{"status retry, GET, nothing left", statusRetry, get, budget(nothing), answer},
		{"status retry, POST", statusRetry, post, budget(more), answer},
		{"status retry, PUT with a streamed body", statusRetry, streamedPut, budget(more), answer},
		// A hop's own 5xx, whatever retry_on_status says.
		{"own failure, GET", ownFailure, get, budget(more), retry},
		{"own failure, POST", ownFailure, post, budget(more), answer},
		// A lead hop (the key's owner) that failed: the plan's own hops
		// are the request's first try, not a retry: no budget is spent.
		{"lead's own failure, budget spent", ownFailure, get, lead(more), nextHop},
		{"lead's broken answer, budget spent", afterWrite, get, lead(more), nextHop},
		{"lead's own failure, POST", ownFailure, post, lead(more), answer},
		{"lead's own failure, nothing left", ownFailure, get, lead(nothing), answer},
		// A CONNECT: a reply that never came goes to the next parent (no
		// client byte was sent, no budget spent); a reply (2xx or
		// refusal) is the answer.
		{"CONNECT reply broke", afterWrite, connect, spent(more), nextHop},
		{"CONNECT reply timed out", timedOut, connect, spent(more), nextHop},
		{"CONNECT reply broke, nothing left", afterWrite, connect, spent(nothing), answer},
		{"CONNECT refused (403)", notFailed, connect, budget(more), answer},
		{"CONNECT status in retry_on_status", statusRetry, connect, budget(more), answer},
		// Broken answers after the request was written.
		{"broken answer, GET", afterWrite, get, budget(more), retry},
		{"broken answer, GET, budget spent", afterWrite, get, spent(more), answer},
		{"broken answer, POST", afterWrite, post, budget(more), answer},
		{"timeout, GET, 504 not retried", timedOut, get, budget(more), answer},
		{"timeout, GET, 504 retried", timedOut, get504, budget(more), retry},
		// A wait given up because its parent was found dead: the next
		// hop, as a hedge would have been, whatever the retry budget.
		{"given up, GET, budget spent", givenUp, get, spent(more), nextHop},
		{"given up, GET, nothing left", givenUp, get, spent(nothing), answer},
		{"given up, POST", givenUp, post, budget(more), answer},
		// A pooled connection the peer had closed: the same hop, fresh.
		{"stale pooled connection", staleConn, post, spent(more), sameFresh},
		// Nothing to redo.
		{"an answer", notFailed, get, budget(more), answer},
		{"a byte reached the client", committed, get, budget(more), answer},
	} {
		if got := decide(tc.c, tc.f, tc.s); got != tc.want {
			t.Errorf("%s: %s; want %s", tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct {
		c    failure
		f    facts
		want bool
	}{
		{afterWrite, get, true}, {timedOut, get, true}, {statusRetry, get, true},
		{connectFailed, get, false}, {beforeWrite, get, false}, {staleConn, get, false}, {siblingMissed, get, false},
		{afterWrite, connect, false}, // a CONNECT retry costs the parents no replayed request
		{lateHead, hedgeable, true}, {peerFull, get, false}, {givenUp, get, false},
	} {
		if got := costsBudget(tc.c, tc.f); got != tc.want {
			t.Errorf("costsBudget(%s, tunnel=%v) = %v; want %v", tc.c, tc.f.tunnel, got, tc.want)
		}
	}
}

func TestIdempotentMethods(t *testing.T) {
	for m, want := range map[string]bool{"GET": true, "HEAD": true, "OPTIONS": true, "TRACE": true, "PUT": true, "DELETE": true, "POST": false, "PATCH": false, "CONNECT": false} {
		if got := idempotent(m); got != want {
			t.Errorf("idempotent(%s) = %v; want %v", m, got, want)
		}
	}
}

func TestSiblingMiss(t *testing.T) {
	for status, want := range map[int]bool{504: true, 503: true, 500: true, 403: true, 407: true, 401: true, 200: false, 404: false, 304: false} {
		if got := siblingMiss(status); got != want {
			t.Errorf("siblingMiss(%d) = %v; want %v", status, got, want)
		}
	}
}

// TestUserAddressesKeptOnlyForMaxUserIP: authenticated requests note
// their address only when a rule has max_user_ip.
func TestUserAddressesKeptOnlyForMaxUserIP(t *testing.T) {
	p := &Proxy{}
	plain, err := CompileRules([]RuleSpec{{Action: "deny", Spec: match.Spec{Users: []string{"bob"}}}})
	if err != nil {
		t.Fatal(err)
	}
	counted, err := CompileRules([]RuleSpec{{Action: "allow"}, {Action: "deny", Spec: match.Spec{MaxUserIP: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if p.usersFor(plain) != nil || p.usersFor(nil) != nil {
		t.Fatal("user addresses kept without a max_user_ip rule")
	}
	if p.usersFor(counted) != &p.users {
		t.Fatal("no user addresses kept for a max_user_ip rule")
	}
}
