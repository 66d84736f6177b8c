package peers

// This file holds the operators' admin states: setting one (with a reason
// and a ttl) and its end when the ttl runs out.

import (
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
)

// SetAdminState sets an operator state. Leaving maintenance does not revive
// a dead peer: it stays dead until a probe succeeds.
func (r *Registry) SetAdminState(name string, s AdminState) (*Peer, error) {
	p, _, err := r.SetAdmin(name, s, "", 0)
	return p, err
}

// SetAdmin sets an operator state with a reason; a positive ttl returns
// the peer to enabled by itself when it ends (logged, and in its
// history). It returns the peer and the admin state it had.
func (r *Registry) SetAdmin(name string, s AdminState, reason string, ttl time.Duration) (*Peer, AdminState, error) {
	var until int64
	if ttl > 0 && s != Enabled {
		until = r.now().Add(ttl).UnixNano()
	}
	return r.setAdmin(name, s, reason, until, true)
}

// setAdmin sets an admin state ending at until (Unix ns; 0: never);
// record adds the change to the peer's history (a restore from the
// state file does not: its history comes with it).
func (r *Registry) setAdmin(name string, s AdminState, reason string, until int64, record bool) (*Peer, AdminState, error) {
	txn := r.writeTxn()
	defer txn.Abort()
	raw, err := txn.First(tablePeers, indexID, name)
	if err != nil {
		return nil, 0, err
	}
	if raw == nil {
		return nil, 0, fmt.Errorf("%w %q", ErrUnknownPeer, name)
	}
	cur := raw.(*row)
	p := cur.Peer
	old := cur.admin
	now := r.now()
	nl := *cur
	nl.admin, nl.reason, nl.until = s, reason, 0
	if s != Enabled {
		nl.until = until
	}
	if cur.liveness == nl.liveness {
		return p, old, nil
	}
	var note *Transition
	if old != s && record {
		note = &Transition{At: now, From: old.String(), To: s.String(), Cause: CauseAdmin, Error: reason}
	}
	if !r.commitRow(txn, p, &nl, note) {
		return nil, 0, fmt.Errorf("%w %q", ErrUnknownPeer, name)
	}
	if nl.until != 0 {
		until := nl.until
		r.overrides.set(name, time.AfterFunc(time.Duration(until-now.UnixNano()), func() { r.expireAdmin(p, until) }))
	} else {
		r.overrides.set(name, nil)
	}
	fields := logrus.Fields{"peer": name, "from": old.String(), "to": s.String()}
	if reason != "" {
		fields["reason"] = reason
	}
	if nl.until != 0 {
		fields["until"] = time.Unix(0, nl.until).UTC().Format(time.RFC3339)
	}
	r.log.WithFields(fields).Warnf("Admin state of %s %s changed to %s", p.Type().Label(), name, s)
	return p, old, nil
}

// expireAdmin returns p to enabled when the admin state set with until
// is still the one in force.
func (r *Registry) expireAdmin(p *Peer, until int64) {
	var was liveness
	if !r.change(p, func(l *liveness) bool {
		if l.until != until {
			return false // replaced meanwhile
		}
		was = *l
		l.admin, l.reason, l.until = Enabled, "", 0
		return true
	}, func(cur *row) *Transition {
		return &Transition{At: r.now(), From: cur.admin.String(), To: Enabled.String(), Cause: CauseAdmin, Error: "ttl ended"}
	}) {
		return
	}
	r.log.WithFields(logrus.Fields{"peer": p.Name(), "from": was.admin.String(), "to": Enabled.String(), "reason": was.reason}).
		Warnf("Admin state of %s %s returned to enabled: its ttl ended", p.Type().Label(), p.Name())
}
