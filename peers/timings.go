package peers

// This file holds the hook the metrics' per-peer histograms hang on: every
// successful connect (requests, tunnels and probes) and every parent's
// answer head hand their time to the peer's two observers, found once per
// peer and kept on it, so the hot path does no label lookup.

import (
	"sync/atomic"
	"time"
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

// timingsOf is p's series, made on first use; nil without Timings.
func (r *Registry) timingsOf(p *Peer) *peerTimings {
	if pt := p.timings.Load(); pt != nil {
		return pt
	}
	t := r.timings.Load()
	if t == nil {
		return nil
	}
	c, h := (*t).For(p.Name())
	pt := &peerTimings{connect: c, head: h}
	if !p.timings.CompareAndSwap(nil, pt) {
		return p.timings.Load()
	}
	return pt
}

// observeConnectTime hands a successful connect's time to p's series.
func (r *Registry) observeConnectTime(p *Peer, d time.Duration) {
	if pt := r.timingsOf(p); pt != nil && d > 0 {
		pt.connect.Observe(d.Seconds())
	}
}

// observeHeadTime hands an answer head's time to p's series.
func (r *Registry) observeHeadTime(p *Peer, d time.Duration) {
	if pt := r.timingsOf(p); pt != nil {
		pt.head.Observe(d.Seconds())
	}
}

// forgetTimings drops the series of a peer that left.
func (r *Registry) forgetTimings(name string) {
	if t := r.timings.Load(); t != nil {
		(*t).Forget(name)
	}
}

// timingsSlot is the field a Peer keeps its series in.
type timingsSlot = atomic.Pointer[peerTimings]
