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

	"github.com/sirupsen/logrus"
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

// FirstByteTimeout is the first_byte_timeout in force for p: the
// configured one, or from its own recent head times (the 95th
// percentile, doubled, at least 200 ms, at most readTimeout); 0 when off.
func (t *Traffic) FirstByteTimeout(h Config, readTimeout time.Duration) time.Duration {
	if !h.FirstByteTimeout.Auto {
		return h.FirstByteTimeout.D
	}
	d := time.Duration(t.answers.timeout.Load())
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

// ObserveAnswer records how a parent answered a request written to it
// whole: a complete answer (AnswerOK, with its head time) resets the
// consecutive count; a failure counts towards answer_fail_limit, at which
// the parent dies by answers unless that would leave more than
// max_answer_dead of the parents dead by answers.
func (r *Registry) ObserveAnswer(p *Peer, class AnswerClass, firstByte time.Duration, at time.Time) {
	r.ObserveAnswerFrom(p, class, firstByte, at, 0)
}

// ObserveAnswerFrom is ObserveAnswer for an answer from the origin whose
// host hashes to origin (OriginHash; 0: not known): under a hashing
// policy parents are compared origin by origin (relative.go).
func (r *Registry) ObserveAnswerFrom(p *Peer, class AnswerClass, firstByte time.Duration, at time.Time, origin uint32) {
	if p.Type() != Parent {
		return
	}
	if class == AnswerOK {
		if firstByte > 0 {
			p.answers.recordHead(at, firstByte, origin)
			p.series.head(at, firstByte)
			r.observeHeadTime(p, firstByte)
		}
		if p.answerConsec.Load() != 0 {
			p.answerConsec.Store(0)
		}
		return
	}
	p.answerByClass[class].Add(1)
	p.series.failure(at)
	n := p.answerConsec.Add(1)
	h := r.opts.Load().Health
	if h.AnswerFailLimit <= 0 || p.State() != Alive {
		return
	}
	if n < int64(h.AnswerFailLimit) {
		// Suspect: behind the healthy parents, and settled by HTTP
		// probes (each failed one is one more answer failure), so the
		// count is finished without client traffic.
		detail := fmt.Sprintf("answer failed (%s, %d of %d before dead)", class, n, h.AnswerFailLimit)
		if r.suspectByAnswers(p, CauseAnswerFailures, detail) {
			r.logSuspicion(p, at, true, CauseAnswerFailures, detail)
		}
		return
	}
	if !r.mayDieByAnswers(p, h) {
		detail := fmt.Sprintf("answer failed (%s, %d in a row), but dead by answers would leave more than max_answer_dead out", class, n)
		if r.suspectByAnswers(p, CauseAnswerFailures, detail) {
			r.logSuspicion(p, at, true, CauseAnswerFailures, detail)
		}
		p.answers.mu.Lock()
		logged := p.answers.capLogged
		p.answers.capLogged = true
		p.answers.mu.Unlock()
		if !logged {
			r.log.WithFields(logrus.Fields{"peer": p.Name(), "answer_failures": n}).
				Warnf("%s %s stays alive (suspect): max_answer_dead (%g%%) of the parents are dead by answers", p.Type().Label(), p.Name(), float64(h.MaxAnswerDead)*100)
		}
		return
	}
	fbt := p.FirstByteTimeout(h, r.opts.Load().ReadTimeout)
	r.dieByAnswers(p, class, n, fbt, at)
}

// mayDieByAnswers reports whether one more parent dead by answers stays
// within max_answer_dead.
func (r *Registry) mayDieByAnswers(p *Peer, h Config) bool {
	parents, dead := 0, 1
	for _, q := range r.Peers() {
		if q.Type() != Parent {
			continue
		}
		parents++
		if q != p && q.State() == Dead && q.live.Load().answerDead {
			dead++
		}
	}
	return parents > 0 && float64(dead) <= float64(h.MaxAnswerDead)*float64(parents)+1e-9
}

// dieByAnswers makes an alive parent dead by answer failures.
func (r *Registry) dieByAnswers(p *Peer, class AnswerClass, n int64, fbt time.Duration, at time.Time) {
	txn := r.writeTxn()
	defer txn.Abort()
	cur := p.live.Load()
	if cur.state != Alive {
		return
	}
	h := r.opts.Load().Health
	nl := *cur
	nl.state, nl.answerDead, nl.deadFBT = Dead, true, int64(fbt)
	nl.deaths++
	nl.since = at.UnixNano()
	nl.suspect, nl.suspectBy, nl.httpSettle = false, "", false
	nl.good = 0
	if p.noteDeath(at.UnixNano(), h.FlapWindow, h.FlapLimit) {
		nl.flapping = true
	}
	why := fmt.Sprintf("%d consecutive answer failures (last: %s)", n, class)
	if !r.commitTxn(txn, p, &nl, &Transition{At: at, From: Alive.String(), To: Dead.String(), Cause: CauseAnswerFailures, Error: why}) {
		return
	}
	p.rampUntil.Store(0)
	p.answers.mu.Lock()
	p.answers.capLogged = false
	p.answers.mu.Unlock()
	entry := r.log.WithFields(logrus.Fields{"peer": p.Name(), "from": "alive", "to": "dead", "err": why, "answer_failures": n})
	if nl.flapping && !cur.flapping {
		entry = entry.WithField("flapping", true)
	}
	entry.Warnf("Detected DEAD %s: %s (answers)", p.Type().Label(), p.Name())
}

// ObserveHTTPProbe records an HTTP probe of p: ok is a complete head,
// not 502/503/504, within the probe's deadline. Only it revives a parent
// dead by answers (flap damping applies); it also settles a suspicion the
// fleet raised about an answer death. A failed one counts as a failed
// probe (and, on a suspect parent, as an answer failure).
func (r *Registry) ObserveHTTPProbe(p *Peer, ok bool, err error, class AnswerClass, at time.Time) {
	l := p.live.Load()
	if l.outlier {
		// An outlier's probe measures it: back within the factor, it is
		// no longer suspect; still too slow (class late), it stays one,
		// with no answer failure counted (it answered); any other failure
		// counts as for any suspect parent.
		switch {
		case ok && p.outlierHeld(at):
			return // fast, but its answers were slow again soon after the last revival: held
		case ok:
			r.clearOutlier(p, at, "own HTTP probe answered within outlier_factor")
			p.answerConsec.Store(0)
			return
		case class == AnswerLate:
			p.probeFailures.Add(1)
			return
		}
	}
	if !ok {
		p.probeFailures.Add(1)
		if err != nil {
			msg := "http probe: " + err.Error()
			p.lastError.Store(&msg)
		}
		switch {
		case l.state == Dead && l.good > 0:
			r.holdProbe(p, 0, nil)
		case l.state == Alive && l.httpSettle:
			r.ObserveAnswer(p, class, 0, at)
		}
		return
	}
	switch {
	case l.state == Alive && l.httpSettle:
		r.setSuspectBy(p, false, "", settledByProbe(at, "own HTTP probe answered"))
		p.answerConsec.Store(0)
	case l.state == Dead && l.answerDead:
		if l.flapping {
			if need := r.opts.Load().Health.FlapLimit; l.good+1 < need {
				r.holdProbe(p, l.good+1, &Transition{At: at, From: l.state.String(), To: l.state.String(), Cause: CauseFlapHold,
					Error: fmt.Sprintf("flapping: good HTTP probe %d of %d held", l.good+1, need)})
				return
			}
		}
		p.answerConsec.Store(0)
		r.transition(p, Dead, Alive, nil, at, CauseProbe)
	}
}

// settledByProbe gives the history entry of a suspicion from outside (the
// fleet) that the peer's own probe settled (how says what the probe did);
// none for a suspicion of the peer's own connects.
func settledByProbe(at time.Time, how string) func(cur *liveness) *Transition {
	return settled(at, CauseProbe, how)
}

// settled is the history entry of a suspicion settled: by cause, how,
// and who had suspected the peer when it was not its own traffic.
func settled(at time.Time, cause, how string) func(cur *liveness) *Transition {
	return func(cur *liveness) *Transition {
		if cur.suspectBy != "" {
			how += " (suspected by " + cur.suspectBy + ")"
		}
		return &Transition{At: at, From: "suspect", To: Alive.String(), Cause: cause, Error: how}
	}
}

// SuspectAnswers marks an alive peer suspect on another member's word
// that it died by answers: the prober settles it with an HTTP probe, not
// a TCP connect (which a parent that accepts but does not answer passes).
func (r *Registry) SuspectAnswers(p *Peer, cause, detail string) bool {
	if !r.suspectByAnswers(p, cause, detail) {
		return false
	}
	r.log.WithFields(logrus.Fields{"peer": p.Name(), "cause": cause, "detail": detail}).
		Warnf("%s %s is suspect: %s; probing it over HTTP", p.Type().Label(), p.Name(), detail)
	return true
}

// suspectByAnswers makes an alive peer suspect until an HTTP probe
// settles it; false when it already was.
func (r *Registry) suspectByAnswers(p *Peer, cause, detail string) bool {
	txn := r.writeTxn()
	defer txn.Abort()
	cur := p.live.Load()
	if cur.state != Alive || (cur.suspect && cur.httpSettle) {
		return false
	}
	nl := *cur
	nl.suspect, nl.httpSettle = true, true
	if cause != "" {
		nl.suspectBy = cause
	}
	return r.commitTxn(txn, p, &nl, &Transition{At: r.now(), From: Alive.String(), To: "suspect", Cause: cause, Error: detail})
}

// DeadCause is "connect" or "answer" for a dead peer, "" otherwise.
func (p *Peer) DeadCause() string {
	l := p.live.Load()
	switch {
	case l.state != Dead:
		return ""
	case l.answerDead:
		return DeadByAnswer
	}
	return DeadByConnect
}

// ProbeKind is the kind of p's next probe: "http" for a parent dead by
// answers (or suspected of it by the fleet), "tcp" otherwise.
func (p *Peer) ProbeKind() string {
	if l := p.live.Load(); l.state == Dead && l.answerDead || l.state == Alive && l.httpSettle {
		return "http"
	}
	return "tcp"
}

// HTTPProbeTimeout is how long an HTTP probe of p may wait for its head
// to count: the first_byte_timeout in force before its death (a parent
// that still answers late is not revived), the one in force now for a
// suspect parent, or probe_timeout when first_byte_timeout is off.
func (r *Registry) HTTPProbeTimeout(p *Peer) time.Duration {
	if d := p.live.Load().deadFBT; d > 0 {
		return time.Duration(d)
	}
	o := r.opts.Load()
	if t := p.FirstByteTimeout(o.Health, o.ReadTimeout); t > 0 {
		return t
	}
	return p.ProbeTimeout()
}

// AnswerFailures is the consecutive answer failures.
func (t *Traffic) AnswerFailures() int64 { return t.answerConsec.Load() }

// AnswerFailuresByClass returns the answer failures by class.
func (t *Traffic) AnswerFailuresByClass() map[string]int64 {
	out := make(map[string]int64, answerClasses-1)
	for c := AnswerLate; c < answerClasses; c++ {
		out[c.String()] = t.answerByClass[c].Load()
	}
	return out
}

// FirstByteMs is the smoothed response-head time, ms (0 before any).
func (t *Traffic) FirstByteMs() float64 {
	t.answers.mu.Lock()
	defer t.answers.mu.Unlock()
	return t.answers.smooth
}

// Hedged counts the requests hedged away from p.
func (t *Traffic) Hedged() int64 { return t.hedged.Load() }

// NoteHedged counts one request of p's that was also sent to another hop.
func (t *Traffic) NoteHedged() { t.hedged.Add(1) }

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
	t := p.FirstByteTimeout(o.Health, o.ReadTimeout)
	return t, t > 0 && o.Health.HedgeRequests
}

// CauseLateAnswer is the history cause of a parent turned suspect because
// a response head was late and the request could not be hedged.
const CauseLateAnswer = "late_answer"

// SuspectLate marks an alive parent suspect because a response head of
// its is past its first-byte timeout and no hedge could find out whether
// the parent or the origin is slow (hedge_budget spent, or no hop left):
// no failure is counted, new requests go to the healthy parents
// meanwhile, and an HTTP probe to the parent itself settles it (a parent
// that answers its own probe at once was waiting on a slow origin).
func (r *Registry) SuspectLate(p *Peer, fbt time.Duration) {
	if p.Type() != Parent {
		return
	}
	if l := p.live.Load(); l.state != Alive || l.suspect {
		return
	}
	detail := fmt.Sprintf("no response head within its first-byte timeout (%s), not hedged", fbt.Round(time.Millisecond))
	if r.suspectByAnswers(p, CauseLateAnswer, detail) {
		r.logSuspicion(p, r.now(), true, CauseLateAnswer, detail)
	}
}
