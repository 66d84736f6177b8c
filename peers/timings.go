package peers

// This file holds the hook the metrics' per-peer histograms hang on: every
// successful connect (requests, tunnels and probes) and every parent's
// answer head hand their time to the peer's two observers, found once per
// peer and kept on its health part (Health.observeTime), so the hot path
// does no label lookup.

import (
	"sync/atomic"
)

// Timing is one histogram series (a prometheus.Observer).
type Timing interface{ Observe(seconds float64) }

// Timings makes a peer's two series: its connect times and its answer
// head times.
type Timings interface {
	For(peer string) (connect, head Timing)
	// Forget drops a peer's series (it left the config).
	Forget(peer string)
}

// peerTimings are the series a peer observes into.
type peerTimings struct{ connect, head Timing }

// SetTimings hangs t on the registry (nil: none); peers find their
// series at their next observation.
func (r *Registry) SetTimings(t Timings) {
	if t == nil {
		r.timings.Store(nil)
		return
	}
	r.timings.Store(&t)
}

// forgetTimings drops the series of a peer that left.
func (r *Registry) forgetTimings(name string) {
	if t := r.timings.Load(); t != nil {
		(*t).Forget(name)
	}
}

// timingsSlot is the field a Peer keeps its series in.
type timingsSlot = atomic.Pointer[peerTimings]
