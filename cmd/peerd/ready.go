package main

// This file holds readiness (GET /readyz): whether this peerd should be
// sent requests now, for a load balancer or Kubernetes. It is ready while
// a request for the default route has a usable next hop (a live parent,
// or DIRECT when allowed); not while it starts (waiting for its peers'
// first verdicts) or stops, nor for filesGrace after it ran out of file
// descriptors. GET /healthz stays liveness.

import (
	"context"
	"fmt"
	"time"

	"github.com/peerd/peerd/selection"
)

// filesGrace is how long after running out of file descriptors peerd
// says it is not ready.
const filesGrace = 10 * time.Second

// Phases of the process, for readiness.
const (
	phaseStarting int32 = iota
	phaseServing
	phaseStopping
)

// readiness answers GET /readyz: ready or not, and the body saying why.
func (s *server) readiness() (bool, any) {
	switch s.phase.Load() {
	case phaseStarting:
		return false, map[string]any{"ready": false, "reason": "starting: the proxy port opens once every peer has a first verdict"}
	case phaseStopping:
		return false, map[string]any{"ready": false, "reason": "stopping: no new connections are taken"}
	}
	if at := s.proxy.OutOfFilesSince(); !at.IsZero() && time.Since(at) < filesGrace {
		return false, map[string]any{"ready": false, "reason": fmt.Sprintf("out of file descriptors %s ago: connections are refused (raise LimitNOFILE, or lower max_connections)", time.Since(at).Round(time.Millisecond))}
	}
	e := s.planner.Explain(selection.DefaultRoute)
	if len(e.Hops) > 0 {
		hops := make([]string, len(e.Hops))
		for i, h := range e.Hops {
			hops[i] = h.Peer
		}
		return true, map[string]any{"ready": true, "next_hops": hops}
	}
	reason := "no usable next hop for the default route: every parent is dead, unknown, drained or full"
	if !s.planner.DirectAllowed() {
		reason += ", and direct is never"
	}
	return false, map[string]any{"ready": false, "reason": reason, "skipped": e.Skipped}
}

// watchNextHop logs losing the last usable next hop once, at warning
// level, and its return at info: each peer change (state or admin state)
// asks readiness again, while serving.
func (s *server) watchNextHop(ctx context.Context) {
	ready := true
	for {
		ch := s.reg.Watch()
		if s.phase.Load() == phaseServing {
			ok, why := s.readiness()
			switch {
			case ready && !ok:
				reason, _ := why.(map[string]any)["reason"].(string)
				s.log.WithField("reason", reason).Warn("no usable next hop: clients get 503")
			case !ready && ok:
				s.log.Info("a next hop is usable again: clients are served")
			}
			ready = ok
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}
