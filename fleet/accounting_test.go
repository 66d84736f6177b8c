package fleet

import (
	"errors"
	"testing"
	"time"

	"github.com/peerd/peerd/peers"
	"github.com/sirupsen/logrus/hooks/test"
)

// TestOwnerFailuresGoThroughTheAccounting: what the engine reports of a
// key's owner through the accounting every hop goes through makes it
// suspect — an error of its own for that key alone, a broken answer or
// a failed connect for all its keys — and counts the request failed; a
// complete answer and a probe's failed connect do not. A parent's answer
// still reaches the registry.
func TestOwnerFailuresGoThroughTheAccounting(t *testing.T) {
	r := newRegistry(t, peers.Spec{Name: "p1", Host: "127.0.0.1", Port: 3128})
	log, _ := test.NewNullLogger()
	f := New(r, log)
	a := f.Accounting(r)
	f.shared.mu.Lock()
	owner := f.shared.hopLocked("b", "127.0.0.2:3128")
	f.shared.mu.Unlock()
	key := []byte("http://origin.test/x")
	now := time.Now()
	suspect := func() (all, one bool) {
		f.shared.mu.Lock()
		defer f.shared.mu.Unlock()
		_, all = f.shared.suspects["b"]
		_, one = f.shared.keySuspects[keySuspect("b", KeyHash(key))]
		return all, len(f.shared.keySuspects) == 1 && one
	}
	failed := func() int64 { return f.OwnerCounts().Asked["failed"] }

	a.Observe(owner, peers.Outcome{Event: peers.Answered, Class: peers.AnswerOK, FirstByte: time.Millisecond, At: now, Origin: KeyHash(key)})
	a.Observe(owner, peers.Outcome{At: now, Err: errors.New("refused"), Probe: true})
	if all, one := suspect(); all || one || failed() != 0 {
		t.Fatalf("after an answer and a probe's failed connect: suspect for all %v, for the key %v, %d failed; want neither, 0", all, one, failed())
	}
	a.Observe(owner, peers.Outcome{Event: peers.Answered, Class: peers.AnswerOwn5xx, FirstByte: 0, At: now, Origin: KeyHash(key)})
	if all, one := suspect(); all || !one || failed() != 1 {
		t.Fatalf("after its own error: suspect for all %v, for the key %v, %d failed; want the key alone, 1", all, one, failed())
	}
	a.Observe(owner, peers.Outcome{Event: peers.Answered, Class: peers.AnswerClosed, FirstByte: 0, At: now, Origin: KeyHash(key)})
	if all, _ := suspect(); !all || failed() != 2 {
		t.Fatalf("after a broken answer: suspect for all %v, %d failed; want all its keys, 2", all, failed())
	}
	f.shared.mu.Lock()
	f.shared.suspects = nil
	f.shared.mu.Unlock()
	a.Observe(owner, peers.Outcome{At: now, Err: errors.New("refused")})
	if all, _ := suspect(); !all || failed() != 3 {
		t.Fatalf("after a failed connect: suspect for all %v, %d failed; want all its keys, 3", all, failed())
	}
	p1 := r.Get("p1")
	a.Observe(p1, peers.Outcome{Event: peers.Answered, Class: peers.AnswerClosed, FirstByte: 0, At: now, Origin: 0})
	if n := p1.Health().AnswerFailures(); n != 1 || failed() != 3 {
		t.Fatalf("a parent's broken answer: %d answer failures, %d owner requests failed; want 1 and 3", n, failed())
	}
}
