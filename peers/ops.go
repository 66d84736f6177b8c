package peers

// This file holds what operators read of a peer beyond its state: failure
// classes and counts, the transition history, flap damping, admin reasons
// and overrides with a ttl, and the slow-start ramp.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"
)

// What operators ask of a peer during an incident: why its connects
// failed (by class), what it reported about its own next hops, what
// happened to it (its history), and who set its admin state, why and
// until when.

// FailureClass is the kind of a failed connect.
type FailureClass uint8

const (
	FailRefused FailureClass = iota
	FailTimeout
	FailReset
	FailUnreachable
	FailDNS
	FailTLS
	failClasses
)

// FailureClassNames are the keys of PEER's failures_by_class, in order.
var FailureClassNames = [failClasses]string{"refused", "timeout", "reset", "unreachable", "dns", "tls"}

// Classify names the kind of a connect error. An error of no known kind
// counts as a reset (the connection failed after it began).
func Classify(err error) FailureClass {
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var recErr tls.RecordHeaderError
	var tlsFail interface{ TLSFailure() bool }
	switch {
	case errors.As(err, &tlsFail) && tlsFail.TLSFailure():
		return FailTLS
	case errors.As(err, &dnsErr):
		return FailDNS
	case errors.As(err, &certErr), errors.As(err, &unknownAuth), errors.As(err, &hostErr), errors.As(err, &recErr):
		return FailTLS
	case errors.Is(err, syscall.ECONNREFUSED):
		return FailRefused
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTDOWN), errors.Is(err, syscall.ENETDOWN):
		return FailUnreachable
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT), isTimeout(err):
		return FailTimeout
	}
	return FailReset
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// CountUpstreamError records an RFC 9209 error type the peer reported in
// Proxy-Status about its own next hop. It never counts against the peer.
func (p *Peer) CountUpstreamError(kind string) {
	p.opsMu.Lock()
	defer p.opsMu.Unlock()
	if p.upstream == nil {
		p.upstream = map[string]int64{}
	}
	if _, ok := p.upstream[kind]; !ok && len(p.upstream) >= 32 {
		kind = "other" // a parent cannot grow the map without bound
	}
	p.upstream[kind]++
}

// UpstreamErrors returns the counts of CountUpstreamError.
func (p *Peer) UpstreamErrors() map[string]int64 {
	p.opsMu.Lock()
	defer p.opsMu.Unlock()
	out := make(map[string]int64, len(p.upstream))
	for k, v := range p.upstream {
		out[k] = v
	}
	return out
}

// FailuresByClass returns the connect failures by class.
func (t *Traffic) FailuresByClass() map[string]int64 {
	out := make(map[string]int64, failClasses)
	for i, n := range FailureClassNames {
		out[n] = t.failures[i].Load()
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

// historyLen is how many transitions a peer keeps.
const historyLen = 64

func (p *Peer) record(t Transition) {
	p.opsMu.Lock()
	defer p.opsMu.Unlock()
	if len(p.history) == historyLen {
		copy(p.history, p.history[1:])
		p.history = p.history[:historyLen-1]
	}
	p.history = append(p.history, t)
}

// History returns the last transitions, oldest first.
func (p *Peer) History() []Transition {
	p.opsMu.Lock()
	defer p.opsMu.Unlock()
	return slices.Clone(p.history)
}

// noteDeath records a death's time and reports whether the peer now
// flaps: limit deaths within window.
func (p *Peer) noteDeath(at int64, window time.Duration, limit int) bool {
	p.opsMu.Lock()
	defer p.opsMu.Unlock()
	p.deathTimes = append(p.deathTimes, at)
	cut := at - int64(window)
	i := 0
	for i < len(p.deathTimes) && p.deathTimes[i] <= cut {
		i++
	}
	p.deathTimes = p.deathTimes[i:]
	if len(p.deathTimes) > 64 {
		p.deathTimes = p.deathTimes[len(p.deathTimes)-64:]
	}
	return limit > 0 && len(p.deathTimes) >= limit
}

// Flapping reports a dead peer whose revival is held by flap damping.
func (p *Peer) Flapping() bool { return p.live.Load().flapping }

// HeldProbes is how many consecutive good probes a flapping peer has had.
func (p *Peer) HeldProbes() int { return p.live.Load().good }

// AdminReason and AdminUntil are the operator's word on the admin state:
// why, and when it returns to enabled by itself (zero: never).
func (p *Peer) AdminReason() string { return p.live.Load().reason }

// AdminUntil is when the admin state set with a ttl ends.
func (p *Peer) AdminUntil() time.Time { return unixTime(p.live.Load().until) }

// Ramp is the share factor of slow start at now: from 0.1 just after a
// revival to 1 once slow_start has passed (1 when slow start is off).
func (p *Peer) Ramp(now time.Time) float64 {
	until := p.rampUntil.Load()
	if until == 0 {
		return 1
	}
	n := now.UnixNano()
	if n >= until {
		p.rampUntil.CompareAndSwap(until, 0)
		return 1
	}
	d := p.settings().slowStart
	if d <= 0 {
		return 1
	}
	elapsed := float64(n - (until - int64(d)))
	return 0.1 + 0.9*max(0, elapsed)/float64(d)
}

// Ramping reports whether the peer is in slow start (a cheap test before
// a clock is read).
func (p *Peer) Ramping() bool { return p.rampUntil.Load() != 0 }

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
