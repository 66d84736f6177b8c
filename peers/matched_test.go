package peers

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// hashedLoad gives the parents a hashing policy's load over the last
// second: every parent answers URLs of the same six origins (a URL hash
// spreads an origin over them), at d each except where slow says; and
// the attacker's one uncacheable URL of its own slow origin always goes
// to parent a (its CARP home), 400 ms to its head.
func hashedLoad(r *Registry, d map[string]time.Duration, attacker bool) {
	for i := 0; i < 10; i++ {
		for _, name := range []string{"a", "b", "c"} {
			for o := 0; o < 6; o++ {
				observeAnswerFrom(r, r.Get(name), AnswerOK, d[name], time.Now(), OriginHash([]byte(fmt.Sprintf("origin%d.example", o))))
			}
		}
		if attacker {
			for k := 0; k < 8; k++ {
				observeAnswerFrom(r, r.Get("a"), AnswerOK, 400*time.Millisecond, time.Now(), OriginHash([]byte("slow.attacker.example")))
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestHashingAttackerMovesNoKeys: under a hashing policy, a client that
// repeats one URL of a slow origin of its own makes its parent neither an
// outlier nor shorter of share (compared origin by origin, that origin
// matches no peer's); compared by overall medians, as under round-robin,
// it did. A parent slow for every origin is still found.
func TestHashingAttackerMovesNoKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fast := map[string]time.Duration{"a": 10 * time.Millisecond, "b": 10 * time.Millisecond, "c": 10 * time.Millisecond}
		r := answersRegistry(t, 3, nil)
		matchOrigins(r)
		hashedLoad(r, fast, true)
		r.Judge(time.Now())
		if a := r.Get("a"); a.Health().Outlier() || share(a) != 1 {
			t.Fatalf("matched: the attacker's parent a: outlier %v, share %v; want neither", a.Health().Outlier(), share(a))
		}

		unmatched := answersRegistry(t, 3, nil)
		hashedLoad(unmatched, fast, true)
		unmatched.Judge(time.Now())
		if a := unmatched.Get("a"); !a.Health().Outlier() && share(a) == 1 {
			t.Fatal("by overall medians the attacker moved nothing either: the test shows nothing")
		}

		slow := answersRegistry(t, 3, nil)
		matchOrigins(slow)
		hashedLoad(slow, map[string]time.Duration{"a": 80 * time.Millisecond, "b": 10 * time.Millisecond, "c": 10 * time.Millisecond}, false)
		slow.Judge(time.Now())
		if a := slow.Get("a"); !a.Health().Outlier() {
			t.Fatalf("matched: a parent 8 times as slow for every origin: outlier %v, share %v; want an outlier", a.Health().Outlier(), share(a))
		}
	})
}

// TestOutlierMarksRateLimited: a parent is marked an outlier at most
// outlierMarks times a minute, whatever flips it.
func TestOutlierMarksRateLimited(t *testing.T) {
	p := &Peer{}
	now := time.Now()
	for i := 0; i < outlierMarks; i++ {
		if p.health.markedRecently(now.Add(time.Duration(i) * time.Second)) {
			t.Fatalf("mark %d refused", i+1)
		}
	}
	if !p.health.markedRecently(now.Add(10 * time.Second)) {
		t.Fatalf("mark %d within a minute allowed", outlierMarks+1)
	}
	if p.health.markedRecently(now.Add(outlierMarkWindow + time.Second)) {
		t.Fatal("a mark a minute after the first refused")
	}
}

// matchOrigins makes r compare its parents origin by origin, as a
// hashing policy's reload would (Options.Matched).
func matchOrigins(r *Registry) {
	o := *r.opts.Load()
	o.Matched = true
	r.opts.Store(&o)
}
