package peers

// This file holds the operator state a restart keeps (contract section
// 19, state_file): admin overrides with reason and end, each peer's
// history and flap state, and what peerd learned of each peer (connect
// and response-head times). Liveness is never kept: every peer still
// starts unknown and is probed before it gets traffic.

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// StateVersion is the state file format this peerd writes and reads; a
// file of a newer version is refused, never half read.
const StateVersion = 1

// SavedState is the state file's content.
type SavedState struct {
	Version int                  `json:"version"`
	Written time.Time            `json:"written"`
	Peers   map[string]PeerState `json:"peers"`
}

// PeerState is what a restart keeps of one peer. Addr ties it to the
// peer: a peer whose address changed starts afresh.
type PeerState struct {
	Addr         string       `json:"addr"`
	AdminState   string       `json:"admin_state"`
	AdminReason  string       `json:"admin_reason,omitempty"`
	AdminUntil   *time.Time   `json:"admin_until,omitempty"`
	History      []Transition `json:"history,omitempty"`
	Deaths       []time.Time  `json:"deaths,omitempty"` // within flap_window, for flap damping
	ConnectMs    float64      `json:"connect_time_ms,omitempty"`
	ConnectVarMs float64      `json:"connect_time_var_ms,omitempty"`
	FirstByteMs  float64      `json:"first_byte_ms,omitempty"`
	// FirstByteTimeoutMs is the automatic first-byte timeout learned.
	FirstByteTimeoutMs float64 `json:"first_byte_timeout_ms,omitempty"`
}

// ExportState returns the state of every peer, to be written at now.
func (r *Registry) ExportState(now time.Time) SavedState {
	st := SavedState{Version: StateVersion, Written: now.UTC(), Peers: map[string]PeerState{}}
	for _, p := range r.Peers() {
		l := p.health.row.Load()
		ps := PeerState{
			Addr: p.Addr(), AdminState: l.admin.String(), AdminReason: l.reason,
			ConnectMs: loadFloat(&p.health.srtt), ConnectVarMs: loadFloat(&p.health.rttvar),
		}
		if l.until != 0 {
			t := time.Unix(0, l.until).UTC()
			ps.AdminUntil = &t
		}
		p.health.opsMu.Lock()
		ps.History = slices.Clone(p.health.history)
		for _, d := range p.health.deathTimes {
			ps.Deaths = append(ps.Deaths, time.Unix(0, d).UTC())
		}
		p.health.opsMu.Unlock()
		p.health.answers.mu.Lock()
		ps.FirstByteMs = p.health.answers.smooth
		ps.FirstByteTimeoutMs = float64(p.health.answers.timeout.Load()) / float64(time.Millisecond)
		p.health.answers.mu.Unlock()
		st.Peers[p.Name()] = ps
	}
	return st
}

// ParseSavedState reads a state file's bytes; anything it cannot read whole is
// an error (the caller logs it and starts afresh).
func ParseSavedState(b []byte) (SavedState, error) {
	var probe struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return SavedState{}, fmt.Errorf("not a state file: %v", err)
	}
	switch {
	case probe.Version > StateVersion:
		return SavedState{}, fmt.Errorf("written by a newer peerd (state version %d; this one reads %d)", probe.Version, StateVersion)
	case probe.Version < 1:
		return SavedState{}, errors.New("no state version")
	}
	var st SavedState
	if err := json.Unmarshal(b, &st); err != nil {
		return SavedState{}, fmt.Errorf("not a state file: %v", err)
	}
	for name, ps := range st.Peers {
		if _, err := ParseAdminState(ps.AdminState); err != nil {
			return SavedState{}, fmt.Errorf("peer %q: %v", name, err)
		}
		if len(ps.History) > historyLen {
			return SavedState{}, fmt.Errorf("peer %q: %d history entries (at most %d)", name, len(ps.History), historyLen)
		}
		if len(ps.Deaths) > 64 {
			return SavedState{}, fmt.Errorf("peer %q: %d death times (at most 64)", name, len(ps.Deaths))
		}
		for _, v := range []float64{ps.ConnectMs, ps.ConnectVarMs, ps.FirstByteMs, ps.FirstByteTimeoutMs} {
			if v < 0 || v > 24*3600*1000 || v != v {
				return SavedState{}, fmt.Errorf("peer %q: a learned time out of range", name)
			}
		}
	}
	return st, nil
}

// ImportState puts what st kept back on the peers of the same name and
// address, at now: an admin state whose end has passed is not restored.
// It reports the peers restored and, with why, those skipped.
func (r *Registry) ImportState(st SavedState, now time.Time) (restored []string, skipped map[string]string) {
	skipped = map[string]string{}
	for name, ps := range st.Peers {
		p := r.Get(name)
		switch {
		case p == nil:
			skipped[name] = "no longer configured"
			continue
		case p.Addr() != ps.Addr:
			skipped[name] = fmt.Sprintf("its address changed (%s, was %s)", p.Addr(), ps.Addr)
			continue
		}
		admin, _ := ParseAdminState(ps.AdminState)
		var until int64
		if ps.AdminUntil != nil {
			until = ps.AdminUntil.UnixNano()
		}
		if admin != Enabled && (until == 0 || until > now.UnixNano()) {
			r.setAdmin(name, admin, ps.AdminReason, until, false)
		}
		p.health.opsMu.Lock()
		h := append(slices.Clone(ps.History), p.health.history...)
		if len(h) > historyLen {
			h = h[len(h)-historyLen:]
		}
		p.health.history = h
		p.health.deathTimes = p.health.deathTimes[:0]
		for _, d := range ps.Deaths {
			p.health.deathTimes = append(p.health.deathTimes, d.UnixNano())
		}
		p.health.opsMu.Unlock()
		if ps.ConnectMs > 0 {
			storeFloat(&p.health.srtt, ps.ConnectMs)
			storeFloat(&p.health.rttvar, ps.ConnectVarMs)
		}
		p.health.answers.mu.Lock()
		if ps.FirstByteMs > 0 {
			p.health.answers.smooth = ps.FirstByteMs
		}
		if ps.FirstByteTimeoutMs > 0 {
			p.health.answers.timeout.Store(int64(ps.FirstByteTimeoutMs * float64(time.Millisecond)))
		}
		p.health.answers.mu.Unlock()
		restored = append(restored, name)
	}
	slices.Sort(restored)
	return restored, skipped
}

// ImportAdmin puts the admin state st kept back on the peers of the same
// name and address that pick accepts, "enabled" included (a binary
// upgrade hands over the old process's operator state, which is newer
// than any file): an admin state whose end has passed is enabled. It
// reports the peers whose admin state changed.
func (r *Registry) ImportAdmin(st SavedState, now time.Time, pick func(name string, ps PeerState) bool) (changed []string) {
	for name, ps := range st.Peers {
		p := r.Get(name)
		if p == nil || p.Addr() != ps.Addr || pick != nil && !pick(name, ps) {
			continue
		}
		admin, err := ParseAdminState(ps.AdminState)
		if err != nil {
			continue
		}
		var until int64
		if ps.AdminUntil != nil {
			until = ps.AdminUntil.UnixNano()
		}
		if until != 0 && until <= now.UnixNano() {
			admin, until = Enabled, 0
		}
		l := p.health.row.Load()
		if l.admin == admin && l.reason == ps.AdminReason && l.until == until {
			continue
		}
		if _, _, err := r.setAdmin(name, admin, ps.AdminReason, until, true); err == nil {
			changed = append(changed, name)
		}
	}
	slices.Sort(changed)
	return changed
}
