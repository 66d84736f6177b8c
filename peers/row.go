package peers

// This file holds a peer's row: the memdb record that is the one home of
// its liveness, and every change of it — a verdict of its health part
// applied (a death, a revival, a suspicion and its end, a flapping
// peer's held probes), written with its history entry and its log line,
// and told to the change feed's subscribers.

import (
	"fmt"
	"slices"
	"time"

	memdb "github.com/hashicorp/go-memdb"
	"github.com/sirupsen/logrus"
)

// row is the memdb record of a peer, and the truth about its liveness.
// Rows are never modified after insert: a change copies the row, changes
// its liveness and inserts it (so watchers see every change); the same
// write transaction publishes it to the peer's health part
// (Health.row), for lock-free reads. State is the liveness's state as a
// word, for the index ("all dead parents" is an index lookup); it is
// written with the liveness, never apart from it.
type row struct {
	Name  string
	Order int
	Type  string
	State string
	Peer  *Peer
	liveness
}

// liveness is a peer's state as the registry decides it: its liveness,
// admin state, whether it is suspect, and its transitions.
type liveness struct {
	state   State
	admin   AdminState
	suspect bool // alive, with failed connects below the limit or a connect pending past its hedge delay
	// suspectBy is the cause of a suspicion from outside the peer's own
	// connects (CauseFleet); "" otherwise.
	suspectBy string
	since     int64 // dead since, Unix nanoseconds; 0 when not dead
	deaths    int64
	revived   int64
	// The operator's reason for the admin state, and when it ends by
	// itself (Unix nanoseconds; 0: never).
	reason string
	until  int64
	// Flap damping: the peer died flap_limit times within flap_window;
	// it is revived after flap_limit consecutive good probes (good so
	// far).
	flapping bool
	good     int
	// answerDead: dead by answer failures (revived only by an HTTP
	// probe), with deadFBT the first_byte_timeout in force then (ns).
	answerDead bool
	deadFBT    int64
	// httpSettle: a suspicion (from the fleet's word of an answer death,
	// or an outlier) that only an HTTP probe settles.
	httpSettle bool
	// outlier: suspect for being far slower than its peers (relative.go).
	outlier bool
	// noNextHop: alive, but cut off: it said it has no usable next hop
	// of its own (noNextHopBy: CauseNextHop or CauseICP) (beyond.go).
	noNextHop   bool
	noNextHopBy string
}

// change writes p's row with its liveness changed by edit, and note (if
// any, made from the row it replaces) into p's history, in one write
// transaction; edit reports false to change nothing (prevent watch
// churn). It reports whether the row changed. A peer a reload removed has
// no row and is left alone.
func (r *Registry) change(p *Peer, edit func(l *liveness) bool, note func(cur *row) *Transition) bool {
	txn := r.writeTxn()
	defer txn.Abort()
	cur := p.health.row.Load()
	nr := *cur
	if !edit(&nr.liveness) {
		return false
	}
	var t *Transition
	if note != nil {
		t = note(cur)
	}
	return r.commitRow(txn, p, &nr, t)
}

// commitRow writes nr as p's row, note (if any) into p's history, nr to
// its health part, then commits.
func (r *Registry) commitRow(txn *memdb.Txn, p *Peer, nr *row, note *Transition) bool {
	raw, err := txn.First(tablePeers, indexID, p.Name())
	if err != nil || raw == nil || raw.(*row).Peer != p {
		return false
	}
	nr.State = nr.state.String()
	if err := txn.Insert(tablePeers, nr); err != nil {
		r.log.WithError(err).WithField("peer", p.Name()).Error("peers: registry update failed")
		return false
	}
	if note != nil {
		// Into the history before anyone can see the change, and under
		// the write lock: a change that follows this one (a probe
		// settling what this made suspect, a revival after this death)
		// cannot be written ahead of it.
		p.health.record(*note)
	}
	p.health.row.Store(nr)
	r.commit(txn, false)
	return true
}

// commit commits txn and tells the subscribers which peers it changed;
// all says the peer set itself changed (a reload).
func (r *Registry) commit(txn *memdb.Txn, all bool) {
	changes := txn.Changes()
	txn.Commit()
	var ps []*Peer
	if !all {
		for _, ch := range changes {
			if rw, ok := ch.After.(*row); ok {
				ps = append(ps, rw.Peer)
			} else if rw, ok := ch.Before.(*row); ok {
				ps = append(ps, rw.Peer)
			}
		}
	}
	if len(ps) == 0 && !all {
		return
	}
	r.subs.mu.Lock()
	defer r.subs.mu.Unlock()
	for _, c := range r.subs.list {
		c.add(ps, all)
	}
}

// transition moves p from one state to another. Exactly one caller wins a
// given transition: the check and the change happen inside one memdb write
// transaction, which also serialises transitions with reloads. A death by
// answers (v.answers) keeps the first-byte timeout it died under.
func (r *Registry) transition(p *Peer, v verdict, at time.Time) bool {
	from, to := v.from, Alive
	if v.change == die {
		to = Dead
	}
	consecutive := p.health.consecutive.Load()
	h := r.opts.Load().Health
	var was liveness
	why := v.cause
	if v.answers {
		why = CauseAnswerFailures
	}
	ok := r.change(p, func(l *liveness) bool {
		if l.state != from {
			return false
		}
		was = *l
		l.state = to
		switch to {
		case Dead:
			l.deaths++
			l.since = at.UnixNano()
			l.suspect, l.suspectBy, l.httpSettle = false, "", false
			l.noNextHop, l.noNextHopBy = false, "" // a revival learns it again
			l.good = 0
			l.answerDead, l.deadFBT = v.answers, int64(v.fbt)
			if from == Alive && p.health.noteDeath(at.UnixNano(), h.FlapWindow, h.FlapLimit) {
				l.flapping = true
			}
		case Alive:
			p.health.consecutive.Store(0)
			l.suspect, l.suspectBy, l.httpSettle = false, "", false
			l.answerDead, l.deadFBT = false, 0
			l.since = 0
			l.flapping, l.good = false, 0
			if from == Dead {
				l.revived++
			}
		}
		return true
	}, func(*row) *Transition {
		return &Transition{At: at, From: from.String(), To: to.String(), Cause: why, Error: v.detail}
	})
	if !ok {
		return false
	}
	s := p.settings()
	if to == Alive && from == Dead && s.slowStart > 0 && s.typ == Parent {
		p.health.rampUntil.Store(at.UnixNano() + int64(s.slowStart))
	}
	if to == Dead {
		p.health.rampUntil.Store(0)
	}
	entry := r.log.WithFields(logrus.Fields{"peer": p.Name(), "from": from.String(), "to": to.String()})
	flapped := p.health.row.Load().flapping && !was.flapping
	switch {
	case to == Dead && v.answers:
		p.health.answers.mu.Lock()
		p.health.answers.capLogged = false
		p.health.answers.mu.Unlock()
		entry = entry.WithFields(logrus.Fields{"err": v.detail, "answer_failures": v.n})
		if flapped {
			entry = entry.WithField("flapping", true)
		}
		entry.Warnf("Detected DEAD %s: %s (answers)", p.Type().Label(), p.Name())
	case to == Dead:
		entry = entry.WithFields(logrus.Fields{"err": v.detail, "consecutive_failures": consecutive})
		if flapped {
			entry = entry.WithField("flapping", true)
		}
		entry.Warnf("Detected DEAD %s: %s", p.Type().Label(), p.Name())
	case from == Dead:
		entry.Warnf("Detected REVIVED %s: %s", p.Type().Label(), p.Name())
	default:
		entry.Infof("%s %s is alive", p.Type().Label(), p.Name())
	}
	return true
}

// cutOff cuts an alive parent off (v.change cutOff: it said it has no
// usable next hop; v.cause who said it), or ends that (reconnect). A
// parent cut off stays alive and probed; it is sent no request.
func (r *Registry) cutOff(p *Peer, v verdict, at time.Time) {
	on := v.change == cutOff
	if !r.change(p, func(l *liveness) bool {
		if l.state != Alive || l.noNextHop == on {
			return false
		}
		l.noNextHop, l.noNextHopBy = on, ""
		if on {
			l.noNextHopBy = v.cause
		}
		return true
	}, func(*row) *Transition {
		if on {
			return &Transition{At: at, From: Alive.String(), To: noNextHopState, Cause: v.cause, Error: v.detail}
		}
		return &Transition{At: at, From: noNextHopState, To: Alive.String(), Cause: v.cause, Error: v.detail}
	}) {
		return
	}
	entry := r.log.WithFields(logrus.Fields{"peer": p.Name(), "cause": v.cause, "detail": v.detail})
	if on {
		entry.Warnf("%s %s has no usable next hop: %s; no requests go to it until it has one", p.Type().Label(), p.Name(), v.detail)
	} else {
		entry.Warnf("%s %s has a usable next hop again: %s", p.Type().Label(), p.Name(), v.detail)
	}
}

// noNextHopState is a parent cut off, as its history names it.
const noNextHopState = "no_next_hop"

// logDest logs a destination the parent cannot reach (destLost) or
// reaches again (destBack), at most one line per destLogEvery per
// parent, the next one counting those not logged.
func (r *Registry) logDest(p *Peer, v verdict, at time.Time) {
	ok, quiet := p.health.logDestAllowed(at)
	if !ok {
		return
	}
	entry := r.log.WithFields(logrus.Fields{"peer": p.Name(), "destination": v.detail, "cause": v.cause})
	if quiet > 0 {
		entry = entry.WithField("changes_not_logged", quiet)
	}
	if v.change == destLost {
		entry.Warnf("%s %s cannot reach %s (%s): requests for it go to other next hops until a probe through it reaches it", p.Type().Label(), p.Name(), v.detail, v.cause)
	} else {
		entry.Warnf("%s %s reaches %s again (a probe through it did)", p.Type().Label(), p.Name(), v.detail)
	}
}

// holdProbe records a flapping peer's run of good probes.
func (r *Registry) holdProbe(p *Peer, good int, note *Transition) {
	r.change(p, func(l *liveness) bool {
		if l.state != Dead || l.good == good {
			return false
		}
		l.good = good
		return true
	}, func(*row) *Transition { return note })
}

// setSuspect changes an alive peer's suspicion; it reports whether it
// changed. A suspicion is the peer's own (by ""), or another's word (by
// its cause); byAnswers makes it one that only an HTTP probe settles.
// note, if not nil, gives the history entry of the change from the row
// it replaces.
func (r *Registry) setSuspect(p *Peer, suspect, byAnswers bool, by string, note func(cur *row) *Transition) bool {
	return r.change(p, func(l *liveness) bool {
		switch {
		case l.state != Alive:
			return false
		case byAnswers:
			if l.suspect && l.httpSettle {
				return false // prevent watch churn
			}
			l.suspect, l.httpSettle = true, true
			if by != "" {
				l.suspectBy = by
			}
			return true
		case l.suspect == suspect:
			return false // prevent watch churn
		}
		l.suspect, l.suspectBy = suspect, by
		if !suspect {
			l.httpSettle = false
		}
		return true
	}, note)
}

// suspicionLogEvery spaces one peer's suspicion lines: a parent that
// fails one connect in a hundred turns suspect and back as often, and a
// line each would be a line per request (each change still goes into
// its history).
const suspicionLogEvery = 10 * time.Second

// logSuspicion logs a peer turning suspect or healthy again, at most one
// line per suspicionLogEvery, the line counting the changes not logged.
func (r *Registry) logSuspicion(p *Peer, at time.Time, suspect bool, cause, detail string) {
	h := &p.health
	h.opsMu.Lock()
	if at.Sub(h.suspectLog) < suspicionLogEvery {
		h.suspectMut++
		h.opsMu.Unlock()
		return
	}
	quiet := h.suspectMut
	h.suspectLog, h.suspectMut = at, 0
	h.opsMu.Unlock()
	l := r.log.WithFields(logrus.Fields{"peer": p.Name(), "cause": cause, "detail": detail})
	if quiet > 0 {
		l = l.WithField("changes_not_logged", quiet)
	}
	if suspect {
		l.Infof("%s %s is suspect: %s", p.Type().Label(), p.Name(), detail)
	} else {
		l.Infof("%s %s is no longer suspect: %s", p.Type().Label(), p.Name(), detail)
	}
}

// historyLen is how many transitions a peer keeps.
const historyLen = 64

// record adds a transition to the peer's history.
func (h *Health) record(t Transition) {
	h.opsMu.Lock()
	defer h.opsMu.Unlock()
	if len(h.history) == historyLen {
		copy(h.history, h.history[1:])
		h.history = h.history[:historyLen-1]
	}
	h.history = append(h.history, t)
}

// History returns the last transitions, oldest first.
func (h *Health) History() []Transition {
	h.opsMu.Lock()
	defer h.opsMu.Unlock()
	return slices.Clone(h.history)
}

// noteDeath records a death's time and reports whether the peer now
// flaps: limit deaths within window.
func (h *Health) noteDeath(at int64, window time.Duration, limit int) bool {
	h.opsMu.Lock()
	defer h.opsMu.Unlock()
	h.deathTimes = append(h.deathTimes, at)
	cut := at - int64(window)
	i := 0
	for i < len(h.deathTimes) && h.deathTimes[i] <= cut {
		i++
	}
	h.deathTimes = h.deathTimes[i:]
	if len(h.deathTimes) > 64 {
		h.deathTimes = h.deathTimes[len(h.deathTimes)-64:]
	}
	return limit > 0 && len(h.deathTimes) >= limit
}

// settled is the history entry of a suspicion settled: by cause, how,
// and who had suspected the peer when it was not its own traffic.
func settled(at time.Time, cause, how string) func(cur *row) *Transition {
	return func(cur *row) *Transition {
		if cur.suspectBy != "" {
			how += " (suspected by " + cur.suspectBy + ")"
		}
		return &Transition{At: at, From: "suspect", To: Alive.String(), Cause: cause, Error: how}
	}
}

// suspected is the history entry of a peer turning suspect.
func suspected(at time.Time, cause, detail string) func(*row) *Transition {
	return func(*row) *Transition {
		return &Transition{At: at, From: Alive.String(), To: "suspect", Cause: cause, Error: detail}
	}
}

// heldNote is the history entry of a flapping peer's good probe held.
func heldNote(at time.Time, l *row, what string, need int) *Transition {
	return &Transition{At: at, From: l.state.String(), To: l.state.String(), Cause: CauseFlapHold,
		Error: fmt.Sprintf("flapping: good %s %d of %d held", what, l.good+1, need)}
}
