package main

// This file holds the operator state across a binary upgrade and a
// restart: the state handed to a new process through the upgrade itself
// (as the upgrade starts, and again as the old process lets go, its admin
// API stopped first, so that no drain lands where nobody keeps it), and
// the warnings when operator state cannot be kept (no state_file).

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/peerd/peerd/peers"
)

// operatorState is the state handed to a new process.
func (s *server) operatorState() []byte {
	b, _ := json.Marshal(s.reg.ExportState(time.Now()))
	return b
}

// takeHandedState puts the old process's state in force in a process
// started by an upgrade, before it serves: it is newer than the state
// file (a drain made a moment before SIGUSR2 may not be written yet).
// The old process's last state, once it lets go, is applied where it
// changed since.
func (s *server) takeHandedState() {
	b, err := s.upg.HandedState()
	if err != nil {
		s.log.WithField("err", err.Error()).Warn("binary upgrade: operator state not handed over; the state file's is in force")
	}
	var first peers.SavedState
	if len(b) > 0 {
		if first, err = peers.ParseSavedState(b); err != nil {
			s.log.WithField("err", err.Error()).Warn("binary upgrade: the operator state handed over is unreadable; the state file's is in force")
		} else {
			now := time.Now()
			s.reg.ImportState(first, now)
			changed := s.reg.ImportAdmin(first, now, nil)
			s.log.WithFields(logrus.Fields{"peers": len(first.Peers), "admin_changed": strings.Join(changed, ",")}).
				Info("binary upgrade: operator state taken over from the old process")
		}
	}
	s.upg.LateState(func(b []byte) {
		last, err := peers.ParseSavedState(b)
		if err != nil {
			s.log.WithField("err", err.Error()).Warn("binary upgrade: the old process's last operator state is unreadable")
			return
		}
		// Only what changed in the old process after the first hand-over:
		// a change made here since is not undone.
		changed := s.reg.ImportAdmin(last, time.Now(), func(name string, ps peers.PeerState) bool {
			was, ok := first.Peers[name]
			return !ok || !sameAdmin(was, ps)
		})
		if len(changed) > 0 {
			s.log.WithField("peers", strings.Join(changed, ",")).Warn("binary upgrade: admin changes made on the old process while both ran are now in force here")
		}
	})
}

// sameAdmin reports whether two saved states say the same admin state.
func sameAdmin(a, b peers.PeerState) bool {
	return a.AdminState == b.AdminState && a.AdminReason == b.AdminReason &&
		(a.AdminUntil == nil) == (b.AdminUntil == nil) && (a.AdminUntil == nil || a.AdminUntil.Equal(*b.AdminUntil))
}

// handOverState is the old process letting go: its admin API stops
// taking changes (the new process serves it on the same socket), then
// the new process gets the operator state as it is now.
func (s *server) handOverState() {
	s.mu.Lock()
	adminSrv := s.adminSrv
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := adminSrv.Shutdown(ctx); err != nil {
		adminSrv.Close()
	}
	s.upg.SendLateState()
}

// warnStateNotKept warns, at start, that admin overrides die with the
// process when no state_file keeps them.
func (s *server) warnStateNotKept() {
	if s.cfg.Proxy.StateFile == "" && len(s.cfg.Peers) > 0 {
		s.log.Info("[proxy] state_file is not set: admin drains and overrides end when peerd restarts (a binary upgrade hands them over; a stop that loses some says so); set it, e.g. /var/lib/peerd/state.json")
	}
}

// warnOverridesLost warns, at a stop that is no hand-over, of the admin
// overrides that no state_file keeps.
func (s *server) warnOverridesLost() {
	s.mu.Lock()
	path := s.cfg.Proxy.StateFile
	s.mu.Unlock()
	if path != "" {
		return
	}
	var lost []string
	for _, p := range s.reg.Peers() {
		if a := p.Health().AdminState(); a != peers.Enabled {
			lost = append(lost, p.Name()+" ("+a.String()+")")
		}
	}
	if len(lost) > 0 {
		s.log.WithField("peers", strings.Join(lost, ", ")).Warn("operator state not kept: these admin overrides end with this process ([proxy] state_file is not set)")
	}
}
