package peers

// This file holds what operators read of a peer beyond its state: the
// transition history's entries and their causes, the errors it reported
// of its own next hops, flap damping, admin reasons and overrides with a
// ttl, and the slow-start ramp.

import (
	"sync"
	"time"
)

// countUpstream records an RFC 9209 error type the peer reported in
// Proxy-Status about its own next hop. It never counts against the peer.
func (h *Health) countUpstream(kind string) {
	h.opsMu.Lock()
	defer h.opsMu.Unlock()
	if h.upstream == nil {
		h.upstream = map[string]int64{}
	}
	if _, ok := h.upstream[kind]; !ok && len(h.upstream) >= 32 {
		kind = "other" // a parent cannot grow the map without bound
	}
	h.upstream[kind]++
}

// upstreamErrors returns the counts of countUpstream.
func (h *Health) upstreamErrors() map[string]int64 {
	h.opsMu.Lock()
	defer h.opsMu.Unlock()
	out := make(map[string]int64, len(h.upstream))
	for k, v := range h.upstream {
		out[k] = v
	}
	return out
}

// Transition is one entry of a peer's history.
type Transition struct {
	At    time.Time `json:"at"`
	From  string    `json:"from"`
	To    string    `json:"to"`
	Cause string    `json:"cause"`
	Error string    `json:"error"`
}

// Causes of transitions.
const (
	CauseConnectFailures = "connect_failures"
	CauseProbe           = "probe"
	CauseAdmin           = "admin"
	CauseReload          = "reload"
	CauseFleet           = "fleet"
	CauseFlapHold        = "flap_hold"
	// A connect pending past its hedge delay makes a peer suspect; a
	// traffic connect that succeeds settles a suspicion.
	CauseSlowConnect = "slow_connect"
	CauseConnect     = "connect"
)

// Flapping reports a dead peer whose revival is held by flap damping.
func (h *Health) Flapping() bool { return h.row.Load().flapping }

// Ramp is the share factor of slow start at now: from 0.1 just after a
// revival to 1 once slow_start has passed (1 when slow start is off).
func (h *Health) Ramp(now time.Time) float64 {
	until := h.rampUntil.Load()
	if until == 0 {
		return 1
	}
	n := now.UnixNano()
	if n >= until {
		h.rampUntil.CompareAndSwap(until, 0)
		return 1
	}
	d := h.peer.settings().slowStart
	if d <= 0 {
		return 1
	}
	elapsed := float64(n - (until - int64(d)))
	return 0.1 + 0.9*max(0, elapsed)/float64(d)
}

// Ramping reports whether the peer is in slow start (a cheap test before
// a clock is read).
func (h *Health) Ramping() bool { return h.rampUntil.Load() != 0 }

// overrides: admin states set with a ttl end by themselves.
type overrides struct {
	mu     sync.Mutex
	timers map[string]*time.Timer
}

func (o *overrides) set(name string, t *time.Timer) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.timers == nil {
		o.timers = map[string]*time.Timer{}
	}
	if old := o.timers[name]; old != nil {
		old.Stop()
	}
	if t == nil {
		delete(o.timers, name)
		return
	}
	o.timers[name] = t
}
