package peers

// This file holds how a parent is judged by its answers (contract section
// 16): answer failures by class, the response-head times behind
// first_byte_timeout = "auto", a death by answers (capped by
// max_answer_dead), and its revival by an HTTP probe only.

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// AnswerClass is the class of an answer failure; AnswerOK is a complete
// answer that is none.
type AnswerClass uint8

const (
	AnswerOK AnswerClass = iota
	AnswerLate
	AnswerClosed
	AnswerReset
	AnswerTimeout
	AnswerOwn5xx
	answerClasses
)

// AnswerClassNames are the keys of PEER's answer_failures_by_class.
var AnswerClassNames = [answerClasses]string{"ok", "late", "closed", "reset", "timeout", "own_5xx"}

func (c AnswerClass) String() string { return AnswerClassNames[c] }

// CauseAnswerFailures is the history cause of a death by answers.
const CauseAnswerFailures = "answer_failures"

// Dead causes (PEER dead_cause).
const (
	DeadByConnect = "connect"
	DeadByAnswer  = "answer"
)

// answerStats are a parent's answers: head times and failures.
type answerStats struct {
	mu sync.Mutex
	// heads is a ring of the last response-head times (ns).
	heads [64]int64
	n     int
	next  int
	// timeout is the first_byte_timeout in force, recomputed every few
	// heads (ns) under mu; 0 before any. Every request reads it, without
	// the lock.
	timeout atomic.Int64
	smooth  float64 // smoothed head time, ms
	// capLogged: the max_answer_dead cap held this peer alive, logged.
	capLogged bool
	// timed are the recent heads with their times (relative.go).
	timed timedHeads
}

// minFirstByte and unknownFirstByte bound the automatic first-byte
// timeout: never under 200 ms, and 1 s until a few heads were seen.
const (
	minFirstByte     = 200 * time.Millisecond
	unknownFirstByte = time.Second
	autoMargin       = 2 // times the 95th percentile
	autoSamples      = 8
)

// FirstByteTimeout is the first_byte_timeout in force for the parent:
// the configured one, or from its own recent head times (the 95th
// percentile, doubled, at least 200 ms, at most readTimeout); 0 when off.
func (h *Health) FirstByteTimeout(hc Config, readTimeout time.Duration) time.Duration {
	if !hc.FirstByteTimeout.Auto {
		return hc.FirstByteTimeout.D
	}
	d := time.Duration(h.answers.timeout.Load())
	if d == 0 {
		d = unknownFirstByte
	}
	if readTimeout > 0 {
		d = min(d, readTimeout)
	}
	return d
}

// recordHead adds a response-head time that came at at and, every
// autoSamples heads, recomputes the automatic timeout.
func (a *answerStats) recordHead(at time.Time, d time.Duration, origin uint32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.timed.add(at, d, origin)
	a.heads[a.next] = int64(d)
	a.next = (a.next + 1) % len(a.heads)
	a.n++
	ms := float64(d) / float64(time.Millisecond)
	if a.smooth == 0 {
		a.smooth = ms
	} else {
		a.smooth = 0.875*a.smooth + 0.125*ms
	}
	if a.n >= autoSamples && a.n%autoSamples == 0 {
		k := min(a.n, len(a.heads))
		i := (k * 95) / 100 // the 95th percentile's index in sorted order
		if (k*95)%100 == 0 && i > 0 {
			i--
		}
		a.timeout.Store(max(int64(minFirstByte), nthLargest(a.heads[:k], k-i)*autoMargin))
	}
}

// nthLargest is the m-th largest of s (1: the largest; m ≤ len(s) ≤ the
// ring's 64), found without sorting or allocating: it runs on the request
// path every autoSamples answers, and the 95th percentile of 64 heads is
// the 4th largest.
func nthLargest(s []int64, m int) int64 {
	var top [len(answerStats{}.heads)]int64 // the m largest seen so far, largest first
	n := 0
	for _, v := range s {
		if n == m && v <= top[m-1] {
			continue
		}
		if n < m {
			n++
		}
		j := n - 1 // v goes in at j or above; what is below moves down
		for j > 0 && top[j-1] < v {
			top[j] = top[j-1]
			j--
		}
		top[j] = v
	}
	return top[m-1]
}

// observeAnswer judges how a parent answered a request written to it
// whole: a complete answer (AnswerOK, with its head time) resets the
// consecutive count; a failure counts towards answer_fail_limit, at which
// the parent dies by answers (the registry caps how many may:
// max_answer_dead).
func (h *Health) observeAnswer(o Outcome, hc Config, readTimeout time.Duration) verdict {
	if h.peer.settings().typ != Parent {
		return verdict{}
	}
	if o.Class == AnswerOK {
		h.reach.answered(o.Origin) // (its destination reached: a count towards a mark starts over)
		if o.FirstByte > 0 {
			h.answers.recordHead(o.At, o.FirstByte, o.Origin)
			h.series.head(o.At, o.FirstByte)
			h.observeTime(true, o.FirstByte)
		}
		if h.answerConsec.Load() != 0 {
			h.answerConsec.Store(0)
		}
		return verdict{}
	}
	h.answerByClass[o.Class].Add(1)
	h.series.failure(o.At)
	n := h.answerConsec.Add(1)
	if hc.AnswerFailLimit <= 0 || h.row.Load().state != Alive {
		return verdict{}
	}
	if n < int64(hc.AnswerFailLimit) {
		// Suspect: behind the healthy parents, and settled by HTTP
		// probes (each failed one is one more answer failure), so the
		// count is finished without client traffic.
		return verdict{change: suspect, byAnswers: true, cause: CauseAnswerFailures,
			detail: fmt.Sprintf("answer failed (%s, %d of %d before dead)", o.Class, n, hc.AnswerFailLimit)}
	}
	return verdict{change: die, from: Alive, answers: true, n: n, class: o.Class, fbt: h.FirstByteTimeout(hc, readTimeout),
		detail: fmt.Sprintf("%d consecutive answer failures (last: %s)", n, o.Class)}
}

// observeHTTPProbe judges an HTTP probe (Class AnswerOK: a complete head,
// not 502/503/504, within the probe's deadline). Only a good one revives
// a parent dead by answers (flap damping applies); it also settles a
// suspicion of its answers. A failed one counts as a failed probe (and,
// on a parent suspect by its answers, as an answer failure). An
// outlier's probe measures it: back within the factor, it is no longer
// suspect; still too slow (class late), it stays one, with no answer
// failure counted (it answered).
func (h *Health) observeHTTPProbe(o Outcome, hc Config, readTimeout time.Duration) verdict {
	ok := o.Class == AnswerOK
	l := h.row.Load()
	if v, said := h.nextHopProbe(o, l); ok && said {
		return v // what it says of its next hop first; the next probe settles the rest
	}
	if l.outlier {
		switch {
		case ok && h.outlierHeld(o.At):
			return verdict{} // fast, but its answers were slow again soon after the last revival: held
		case ok:
			h.answerConsec.Store(0)
			return verdict{change: unOutlier, detail: "own HTTP probe answered within outlier_factor"}
		case o.Class == AnswerLate:
			h.probeFailures.Add(1)
			return verdict{}
		}
	}
	if !ok {
		h.probeFailures.Add(1)
		if o.Err != nil {
			msg := "http probe: " + o.Err.Error()
			h.lastError.Store(&msg)
		}
		switch {
		case l.state == Dead && l.good > 0:
			return verdict{change: hold}
		case l.state == Alive && l.httpSettle:
			return h.observeAnswer(o, hc, readTimeout)
		}
		return verdict{}
	}
	switch {
	case l.state == Alive && l.httpSettle:
		h.answerConsec.Store(0)
		return verdict{change: settle, cause: CauseProbe, detail: "own HTTP probe answered"}
	case l.state == Dead && l.answerDead:
		if l.flapping && l.good+1 < hc.FlapLimit {
			return verdict{change: hold, good: l.good + 1, note: heldNote(o.At, l, "HTTP probe", hc.FlapLimit)}
		}
		h.answerConsec.Store(0)
		return verdict{change: revive, from: Dead, cause: CauseProbe}
	}
	return verdict{}
}

// observeLate judges a response head past the first-byte timeout fbt that
// no hedge could tell about (hedge_budget spent, or no hop left): no
// failure is counted, new requests go to the healthy parents meanwhile,
// and an HTTP probe to the parent itself settles it (a parent that
// answers its own probe at once was waiting on a slow origin).
func (h *Health) observeLate(fbt time.Duration) verdict {
	if l := h.row.Load(); h.peer.settings().typ != Parent || l.state != Alive || l.suspect {
		return verdict{}
	}
	return verdict{change: suspect, byAnswers: true, cause: CauseLateAnswer,
		detail: fmt.Sprintf("no response head within its first-byte timeout (%s), not hedged", fbt.Round(time.Millisecond))}
}

// HTTPProbeTimeout is how long an HTTP probe of p may wait for its head
// to count: the first_byte_timeout in force before its death (a parent
// that still answers late is not revived), the one in force now for a
// suspect parent, or probe_timeout when first_byte_timeout is off.
func (r *Registry) HTTPProbeTimeout(p *Peer) time.Duration {
	if d := p.health.row.Load().deadFBT; d > 0 {
		return time.Duration(d)
	}
	o := r.opts.Load()
	if t := p.health.FirstByteTimeout(o.Health, o.ReadTimeout); t > 0 {
		return t
	}
	return p.ProbeTimeout()
}

// firstByteMs is the smoothed response-head time, ms (0 before any).
func (h *Health) firstByteMs() float64 {
	h.answers.mu.Lock()
	defer h.answers.mu.Unlock()
	return h.answers.smooth
}

// FirstByte is what the forwarder needs to judge p's answers: the
// first_byte_timeout in force (0: off) and whether a late request is
// hedged to the next hop.
func (r *Registry) FirstByte(p *Peer) (timeout time.Duration, hedge bool) {
	return firstByte(p, p.settings(), r.opts.Load())
}

func firstByte(p *Peer, c *settings, o *Options) (time.Duration, bool) {
	if c.typ != Parent {
		return 0, false
	}
	t := p.health.FirstByteTimeout(o.Health, o.ReadTimeout)
	return t, t > 0 && o.Health.HedgeRequests
}

// CauseLateAnswer is the history cause of a parent turned suspect because
// a response head was late and the request could not be hedged.
const CauseLateAnswer = "late_answer"
