package forwarding

import (
	"errors"
	"github.com/peerd/peerd/internal/match"
	"os"
	"testing"
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
			if got := tc.a.class(tc.st); got != tc.want {
				t.Fatalf("class = %s; want %s", got, tc.want)
			}
		})
	}
}

// TestDecide: the one decision that follows every attempt, written out
// case by case (what an operator would say, not the code's own switch):
// the four next-hop situations — a connect that failed, a sibling's miss,
// a status retry, a CONNECT that broke or was refused — and the rest.
func TestDecide(t *testing.T) {
	get := facts{idempotent: true, replayable: true}
	get504 := facts{idempotent: true, replayable: true, retry504: true}
	streamedPut := facts{idempotent: true}
	post := facts{replayable: true}
	connect := facts{tunnel: true}
	hedgeable := facts{idempotent: true, replayable: true, hedgeable: true}
	for _, tc := range []struct {
		name   string
		c      failure
		f      facts
		budget bool
		want   verdict
	}{
		// A connect that failed: nothing was sent; always the next hop,
		// whatever the method, and for free.
		{"connect failed, GET", connectFailed, get, true, nextHop},
		{"connect failed, POST, no budget", connectFailed, post, false, nextHop},
		{"connect failed, CONNECT", connectFailed, connect, false, nextHop},
		{"head not written, POST", beforeWrite, post, false, nextHop},
		// A sibling's miss is no failure: the next hop, any budget.
		{"sibling miss", siblingMissed, get, false, nextHop},
		{"sibling miss, POST", siblingMissed, post, false, nextHop},
		// A peer at max_conn is skipped, not failed: nothing was sent.
		{"peer full, GET", peerFull, get, false, nextHop},
		{"peer full, POST", peerFull, post, false, nextHop},
		{"peer full, CONNECT", peerFull, connect, false, nextHop},
		// A late head: hedged when the request may be sent twice and the
		// budget allows; otherwise the wait goes on (never an answer).
		{"late head, hedgeable GET", lateHead, hedgeable, true, hedge},
		{"late head, budget spent", lateHead, hedgeable, false, waitOn},
		{"late head, POST", lateHead, post, true, waitOn},
		{"late head, streamed body", lateHead, streamedPut, true, waitOn},
		// A status in retry_on_status: idempotent and replayable, within
		// the budget.
		{"status retry, GET", statusRetry, get, true, nextHop},
		{"status retry, GET, budget spent", statusRetry, get, false, answer},
		{"status retry, POST", statusRetry, post, true, answer},
		{"status retry, PUT with a streamed body", statusRetry, streamedPut, true, answer},
		// A CONNECT: a reply that never came goes to the next parent (no
		// client byte was sent); a reply (2xx or refusal) is the answer.
		{"CONNECT reply broke", afterWrite, connect, false, nextHop},
		{"CONNECT reply timed out", timedOut, connect, false, nextHop},
		{"CONNECT refused (403)", notFailed, connect, true, answer},
		{"CONNECT status in retry_on_status", statusRetry, connect, true, answer},
		// Broken answers after the request was written.
		{"broken answer, GET", afterWrite, get, true, nextHop},
		{"broken answer, GET, budget spent", afterWrite, get, false, answer},
		{"broken answer, POST", afterWrite, post, true, answer},
		{"timeout, GET, 504 not retried", timedOut, get, true, answer},
		{"timeout, GET, 504 retried", timedOut, get504, true, nextHop},
		// A wait given up because its parent was found dead: the next
		// hop, as a hedge would have been, whatever the retry budget.
		{"given up, GET, budget spent", givenUp, get, false, nextHop},
		{"given up, POST", givenUp, post, true, answer},
		// A pooled connection the peer had closed: the same hop, fresh.
		{"stale pooled connection", staleConn, post, false, sameFresh},
		// Nothing to redo.
		{"an answer", notFailed, get, true, answer},
		{"a byte reached the client", committed, get, true, answer},
	} {
		if got := decide(tc.c, tc.f, tc.budget); got != tc.want {
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
