package peers

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sirupsen/logrus/hooks/test"
)

func answersRegistry(t *testing.T, n int, set func(*Config)) *Registry {
	t.Helper()
	h := DefaultConfig()
	h.AnswerFailLimit = 3
	if set != nil {
		set(&h)
	}
	var specs []Spec
	for i := 0; i < n; i++ {
		specs = append(specs, Spec{Name: string(rune('a' + i)), Host: "127.0.0.1", Port: 1000 + i})
	}
	log, _ := test.NewNullLogger()
	r, err := New(Options{Health: h, ConnectTimeout: time.Second, ReadTimeout: time.Minute, Log: log}, specs)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range r.Peers() {
		r.Observe(p, Outcome{At: t0, RTT: time.Millisecond, Probe: true})
	}
	return r
}

// TestDeathByAnswersAndHTTPRevival: answer_fail_limit consecutive answer
// failures kill a parent (cause answers); a complete answer resets the
// count; a TCP connect — even a probe's — never revives it; an HTTP
// probe does.
func TestDeathByAnswersAndHTTPRevival(t *testing.T) {
	r := answersRegistry(t, 4, nil)
	a := r.Get("a")
	observeAnswer(r, a, AnswerTimeout, 0, t0)
	observeAnswer(r, a, AnswerOK, 5*time.Millisecond, t0)
	if a.Health().AnswerFailures() != 0 {
		t.Fatal("a complete answer did not reset the count")
	}
	for i := 0; i < 3; i++ {
		observeAnswer(r, a, AnswerLate, 0, t0)
	}
	if a.Health().State() != Dead || a.Health().DeadCause() != DeadByAnswer || a.Health().ProbeKind() != "http" {
		t.Fatalf("a %v cause %q probe %q; want dead by answers", a.Health().State(), a.Health().DeadCause(), a.Health().ProbeKind())
	}
	h := a.Health().History()
	if last := h[len(h)-1]; last.Cause != CauseAnswerFailures {
		t.Fatalf("history %+v; want cause answer_failures", last)
	}
	r.Observe(a, Outcome{At: t0, RTT: time.Millisecond, Probe: true})
	if a.Health().State() != Dead {
		t.Fatal("a TCP probe that connected revived a parent dead by answers")
	}
	observeHTTPProbe(r, a, false, errors.New("no head"), AnswerTimeout, t0)
	if a.Health().State() != Dead {
		t.Fatal("a failed HTTP probe revived it")
	}
	observeHTTPProbe(r, a, true, nil, AnswerOK, t0)
	if a.Health().State() != Alive || a.Health().DeadCause() != "" || a.Health().ProbeKind() != "tcp" {
		t.Fatalf("after a good HTTP probe: %v %q %q; want alive", a.Health().State(), a.Health().DeadCause(), a.Health().ProbeKind())
	}
	// A connect death is still revived by a TCP probe.
	b := r.Get("b")
	for range b.ConnectFailLimit() {
		r.Observe(b, Outcome{At: t0, Err: errors.New("refused")})
	}
	if b.Health().DeadCause() != DeadByConnect || b.Health().ProbeKind() != "tcp" {
		t.Fatalf("b %q %q; want a connect death probed by TCP", b.Health().DeadCause(), b.Health().ProbeKind())
	}
	r.Observe(b, Outcome{At: t0, RTT: time.Millisecond, Probe: true})
	if b.Health().State() != Alive {
		t.Fatal("a TCP probe did not revive a connect death")
	}
}

// TestMaxAnswerDead: answer failures never leave more than the share of
// parents dead; the one that would cross it stays alive and suspect.
// Connect deaths are not capped.
func TestMaxAnswerDead(t *testing.T) {
	r := answersRegistry(t, 4, nil) // 50% of 4: two
	kill := func(name string) {
		for i := 0; i < 3; i++ {
			observeAnswer(r, r.Get(name), AnswerOwn5xx, 0, t0)
		}
	}
	kill("a")
	kill("b")
	kill("c")
	if r.Get("a").Health().State() != Dead || r.Get("b").Health().State() != Dead {
		t.Fatal("a and b should die by answers")
	}
	c := r.Get("c")
	if c.Health().State() != Alive || !c.Health().Suspect() {
		t.Fatalf("c %v suspect %v; want alive and suspect past max_answer_dead", c.Health().State(), c.Health().Suspect())
	}
	d := r.Get("d")
	for range d.ConnectFailLimit() {
		r.Observe(d, Outcome{At: t0, Err: errors.New("refused")})
	}
	if d.Health().State() != Dead {
		t.Fatal("a connect death was capped")
	}
}

// TestAutoFirstByteTimeout: 1 s until enough heads are known, then the
// 95th percentile doubled, never under 200 ms, never over read_timeout.
func TestAutoFirstByteTimeout(t *testing.T) {
	r := answersRegistry(t, 1, nil)
	a := r.Get("a")
	if got, _ := r.FirstByte(a); got != time.Second {
		t.Fatalf("with no heads: %v; want 1s", got)
	}
	for i := 0; i < 64; i++ {
		observeAnswer(r, a, AnswerOK, time.Millisecond, t0)
	}
	if got, _ := r.FirstByte(a); got != 200*time.Millisecond {
		t.Fatalf("fast heads: %v; want the 200ms floor", got)
	}
	for i := 0; i < 64; i++ {
		d := 100 * time.Millisecond
		if i%10 == 0 {
			d = 900 * time.Millisecond // 10% slow
		}
		observeAnswer(r, a, AnswerOK, d, t0)
	}
	if got, _ := r.FirstByte(a); got != 1800*time.Millisecond {
		t.Fatalf("heads with a slow tenth: %v; want 2 x the 95th percentile (1.8s)", got)
	}
	r2 := answersRegistry(t, 1, func(h *Config) { h.FirstByteTimeout = FirstByteTimeout{} })
	if got, hedge := r2.FirstByte(r2.Get("a")); got != 0 || hedge {
		t.Fatalf("first_byte_timeout = 0s: %v %v; want off", got, hedge)
	}
}

// TestNthLargest: the automatic timeout's percentile, found without a
// sort, is the one a sort finds, for every rank and for ties.
func TestNthLargest(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 500; trial++ {
		s := make([]int64, 1+rng.IntN(64))
		for i := range s {
			s[i] = rng.Int64N(20) // small range: many ties
		}
		sorted := slices.Clone(s)
		slices.Sort(sorted)
		for m := 1; m <= len(s) && m <= 12; m++ {
			if got, want := nthLargest(s, m), sorted[len(s)-m]; got != want {
				t.Fatalf("nthLargest(%v, %d) = %d, want %d", s, m, got, want)
			}
		}
	}
}
