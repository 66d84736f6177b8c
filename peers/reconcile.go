package peers

// This file holds a reload of the peers: the registry reconciled with a
// new list of specs, peers that keep their name and address keeping their
// state, and the settings a spec resolves to.

import (
	"fmt"
	"time"
)

// Reconcile replaces the peer set. Peers whose name and address are unchanged
// keep their handle, state and counters (their other settings are updated);
// new peers, and peers whose host or port changed, start Unknown with zero
// counts; removed peers leave the registry (handles held elsewhere stay
// readable but are no longer listed, selected or probed). specs must have
// been validated.
func (r *Registry) Reconcile(opts Options, specs []Spec) error {
	r.reconcileMu.Lock()
	defer r.reconcileMu.Unlock()

	txn := r.writeTxn()
	defer txn.Abort()

	old := make(map[string]*Peer)
	for _, p := range r.Peers() {
		old[p.Name()] = p
	}
	// Rows are rebuilt from scratch: orders and names may have moved, and a
	// reload is rare enough that one watch wake-up for all is fine.
	if _, err := txn.DeleteAll(tablePeers, indexID); err != nil {
		return err
	}
	next := make([]*Peer, 0, len(specs))
	rows := make([]*row, 0, len(specs))
	for i, spec := range specs {
		spec = spec.WithDefaults()
		typ := spec.Type
		s := resolve(opts, spec, typ)
		p, ok := old[spec.Name]
		if ok && p.Addr() == spec.Addr() {
			p.cfg.Store(s)
		} else {
			p = newPeer(s)
			if r.started {
				why := "added"
				if ok {
					why = "address changed to " + spec.Addr()
				}
				p.health.record(Transition{At: r.now(), From: "", To: Unknown.String(), Cause: CauseReload, Error: why})
			}
			p.health.times = &r.timings
		}
		nr := &row{Name: spec.Name, Order: i, Type: typ.String(), Peer: p, liveness: p.health.row.Load().liveness}
		nr.State = nr.state.String()
		if err := txn.Insert(tablePeers, nr); err != nil {
			return fmt.Errorf("peer %q: %w", spec.Name, err)
		}
		rows = append(rows, nr)
		next = append(next, p)
	}
	o := opts
	r.opts.Store(&o)
	set := &Set{List: next}
	for _, p := range next {
		if p.ICPPort() != 0 {
			set.ICP = append(set.ICP, p)
		}
	}
	r.set.Store(set)
	for i, p := range next {
		p.health.row.Store(rows[i]) // published with the set, before the commit
	}
	r.commit(txn, true)
	r.started = true
	for name, p := range old {
		if r.Get(name) != p {
			r.forgetTimings(name) // left, or moved: its series start over
		}
	}
	return nil
}

func resolve(opts Options, spec Spec, typ Type) *settings {
	s := &settings{spec: spec, typ: typ}
	s.failLimit = int64(opts.Health.ConnectFailLimit)
	if spec.ConnectFailLimit > 0 {
		s.failLimit = int64(spec.ConnectFailLimit)
	}
	if s.failLimit < 1 {
		s.failLimit = 1
	}
	s.connectTimeout = opts.ConnectTimeout
	if spec.ConnectTimeout > 0 {
		s.connectTimeout = spec.ConnectTimeout
	}
	if s.connectTimeout <= 0 {
		s.connectTimeout = 30 * time.Second
	}
	s.probeTimeout = opts.Health.ProbeTimeout
	if s.probeTimeout <= 0 {
		s.probeTimeout = s.connectTimeout
	}
	s.slowStart = opts.Health.SlowStart
	return s
}
