package peers

// This file holds suspicion: a peer marked suspect by its own slow
// connects or by the fleet, logged at a bounded rate, and cleared.

import (
	"time"

	"github.com/sirupsen/logrus"
)

// suspectOwn makes an alive, healthy peer suspect for what its own
// traffic showed (a failed connect below the limit, a slow connect): it
// sorts behind healthy peers and the prober settles it. The change is
// in its history with cause, and logged at info level.
func (r *Registry) suspectOwn(p *Peer, cause, detail string, at time.Time) {
	if r.setSuspectBy(p, true, "", func(*liveness) *Transition {
		return &Transition{At: at, From: Alive.String(), To: "suspect", Cause: cause, Error: detail}
	}) {
		r.logSuspicion(p, at, true, cause, detail)
	}
}

// suspicionLogEvery spaces one peer's suspicion lines: a parent that
// fails one connect in a hundred turns suspect and back as often, and a
// line each would be a line per request (each change still goes into
// its history).
const suspicionLogEvery = 10 * time.Second

// logSuspicion logs a peer turning suspect or healthy again, at most one
// line per suspicionLogEvery, the line counting the changes not logged.
func (r *Registry) logSuspicion(p *Peer, at time.Time, suspect bool, cause, detail string) {
	p.opsMu.Lock()
	if at.Sub(p.suspectLog) < suspicionLogEvery {
		p.suspectMut++
		p.opsMu.Unlock()
		return
	}
	quiet := p.suspectMut
	p.suspectLog, p.suspectMut = at, 0
	p.opsMu.Unlock()
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

// setSuspectBy changes an alive peer's suspicion, with its outside cause
// ("" for the peer's own connects); it reports whether it changed. note,
// if not nil, gives the history entry of the change from the liveness it
// replaces (nil: none).
func (r *Registry) setSuspectBy(p *Peer, suspect bool, by string, note func(cur *liveness) *Transition) bool {
	txn := r.writeTxn()
	defer txn.Abort()
	cur := p.live.Load()
	if cur.state != Alive || cur.suspect == suspect {
		return false // prevent watch churn
	}
	nl := *cur
	nl.suspect, nl.suspectBy = suspect, by
	if !suspect {
		nl.httpSettle = false
	}
	var t *Transition
	if note != nil {
		t = note(cur)
	}
	return r.commitTxn(txn, p, &nl, t)
}

// Suspect marks an alive, healthy peer suspect for a reason that is not
// one of its own connects (a fleet member reported it dead): it sorts
// behind healthy peers, gets no new traffic while a healthy next hop
// exists, and the prober settles it at once with a probe of its own. It
// never makes a peer dead or alive, and it leaves a dead, unknown or
// already suspect peer alone. It reports whether p turned suspect; the
// change is logged and is in p's history with cause.
func (r *Registry) Suspect(p *Peer, cause, detail string) bool {
	if !r.setSuspectBy(p, true, cause, func(*liveness) *Transition {
		return &Transition{At: r.now(), From: Alive.String(), To: "suspect", Cause: cause, Error: detail}
	}) {
		return false
	}
	r.log.WithFields(logrus.Fields{"peer": p.Name(), "cause": cause, "detail": detail}).
		Warnf("%s %s is suspect: %s; probing it", p.Type().Label(), p.Name(), detail)
	return true
}
