// Package probes revives dead peers by background probes: a TCP probe
// (connect, send nothing, close) for a peer dead by its connects, and an
// HTTP probe (by default OPTIONS with Max-Forwards: 0, which the parent
// answers itself, its head timed) for a
// parent dead or suspect by its answers. It also gives unknown peers their first verdict and, with
// idle_probe, checks live peers that carried no traffic for a while. It never
// sends client traffic and never decides a state itself: it reports each
// probe's outcome to the registry, which decides.
package probes

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/peerd/peerd/dialer"
	"github.com/peerd/peerd/internal/stall"
	"github.com/peerd/peerd/peers"
	"github.com/sirupsen/logrus"
)

// Dialer opens a probe connection and reports its outcome to the registry;
// *dialer.Dialer is one.
type Dialer interface {
	DialPeer(ctx context.Context, p *peers.Peer, why dialer.Purpose, timeout time.Duration) (net.Conn, error)
}

// Options configure a Prober.
type Options struct {
	Registry *peers.Registry
	Dialer   Dialer
	// Jitter returns a uniform value in [0, 1); nil means math/rand/v2.
	Jitter func() float64
	// Log: nil means the standard logger.
	Log logrus.FieldLogger
	// Stalls, when set, is peerd's stall guard: an HTTP probe's deadline
	// stretches by peerd's own stalls, and its time excludes them.
	Stalls *stall.Guard
}

// Prober schedules probes. At most one probe per peer is in flight at any
// time, background or on demand.
type Prober struct {
	reg    *peers.Registry
	dialer Dialer
	jitter func() float64
	log    logrus.FieldLogger
	stalls *stall.Guard

	mu    sync.Mutex // guards sched and every schedule in it
	sched map[*peers.Peer]*schedule

	done   chan *peers.Peer // background probes report completion here
	wakeup chan struct{}    // an on-demand probe ended: kicked has its peer
	kicked []*peers.Peer    // guarded by mu
	// kickedAll: too many kicks to list (no scheduler running to take
	// them): the next wake-up looks at every peer.
	kickedAll bool
	wg        sync.WaitGroup
}

// schedule is the prober's plan for one peer. All of it is guarded by
// Prober.mu.
type schedule struct {
	// probing is non-nil while a probe of the peer is in flight,
	// background or on demand, and closed when it ends: the one notion of
	// "in flight".
	probing chan struct{}
	// background: the probe in flight is the scheduler's, which re-arms
	// the back-off when it ends.
	background bool
	next       time.Time     // zero: nothing scheduled
	delay      time.Duration // last back-off delay
	// death is the death count this back-off belongs to; a new death (a
	// higher count) starts the back-off over.
	death     int64
	lastProbe time.Time
	// startedAt is the death count when the probe in flight started.
	startedAt int64
	// settling counts the probes in a row of a suspect (alive) peer.
	settling int
}

// New returns a prober; call Run to start it.
func New(o Options) *Prober {
	p := &Prober{reg: o.Registry, dialer: o.Dialer, jitter: o.Jitter, log: o.Log, stalls: o.Stalls,
		sched: make(map[*peers.Peer]*schedule), done: make(chan *peers.Peer), wakeup: make(chan struct{}, 1)}
	if p.jitter == nil {
		p.jitter = rand.Float64
	}
	if p.log == nil {
		p.log = logrus.StandardLogger()
	}
	return p
}

// NextDelay is the decorrelated-jitter back-off: the delay after prev is
// uniform in [base, 3·prev], capped at max; the first delay is base. A long
// dead peer is probed about every max, and a fleet of children that saw it
// die at once spread their probes instead of arriving in step.
func NextDelay(base, max, prev time.Duration, u float64) time.Duration {
	if prev <= 0 {
		return base
	}
	hi := 3 * prev
	if hi > max {
		hi = max
	}
	if hi <= base {
		return min(base, max)
	}
	return base + time.Duration(u*float64(hi-base))
}

// Run probes until ctx ends, then waits for probes in flight. It acts on
// the peers the registry reports changed (its change feed), on probes that
// end, and on the next probe due; it never rescans every peer but after a
// reload.
func (pr *Prober) Run(ctx context.Context) {
	defer pr.wg.Wait()
	feed := pr.reg.Subscribe()
	defer pr.reg.Unsubscribe(feed)
	changed, all := feed.Take()
	dests := time.NewTicker(destEvery) // destinations a parent cannot reach (destprobe.go)
	defer dests.Stop()
	for {
		wake := pr.tick(ctx, time.Now(), changed, all)
		changed, all = nil, false
		var timer *time.Timer
		var fire <-chan time.Time
		if !wake.IsZero() {
			timer = time.NewTimer(time.Until(wake))
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-feed.C():
			changed, all = feed.Take()
		case <-fire:
		case now := <-dests.C:
			pr.probeDestinations(ctx, now)
		case p := <-pr.done:
			pr.finished(p, time.Now())
			changed = []*peers.Peer{p}
		case <-pr.wakeup:
			pr.mu.Lock()
			changed, all, pr.kicked, pr.kickedAll = pr.kicked, pr.kickedAll, nil, false
			pr.mu.Unlock()
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// tick reschedules the peers that changed (every peer after a reload),
// starts every probe that is due, and returns when the next one is.
func (pr *Prober) tick(ctx context.Context, now time.Time, changed []*peers.Peer, all bool) time.Time {
	health := pr.reg.Health()
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if all {
		current := pr.reg.Peers()
		live := make(map[*peers.Peer]bool, len(current))
		for _, p := range current {
			live[p] = true
			pr.rescheduleLocked(p, health, now)
		}
		// Peers removed by a reload are no longer probed.
		for p, s := range pr.sched {
			if !live[p] && s.probing == nil {
				delete(pr.sched, p)
			}
		}
	} else {
		for _, p := range changed {
			if _, known := pr.sched[p]; known {
				pr.rescheduleLocked(p, health, now)
			}
		}
	}
	var wake time.Time
	for p, s := range pr.sched {
		if s.probing != nil || s.next.IsZero() {
			continue
		}
		if !now.Before(s.next) {
			// Due: asked again, since an idle peer used meanwhile is not.
			pr.rescheduleLocked(p, health, now)
			if s.next.IsZero() {
				continue
			}
			if !now.Before(s.next) {
				pr.startLocked(ctx, p, s)
				continue
			}
		}
		if wake.IsZero() || s.next.Before(wake) {
			wake = s.next
		}
	}
	return wake
}

// rescheduleLocked works out when p is next probed.
func (pr *Prober) rescheduleLocked(p *peers.Peer, h peers.Config, now time.Time) {
	s := pr.scheduleLocked(p)
	s.next = pr.dueLocked(p, s, h, now)
	pr.reg.SetNextProbe(p, s.next)
}

func (pr *Prober) scheduleLocked(p *peers.Peer) *schedule {
	s := pr.sched[p]
	if s == nil {
		s = &schedule{}
		pr.sched[p] = s
	}
	return s
}

// dueLocked says when p should next be probed; zero means not at all.
func (pr *Prober) dueLocked(p *peers.Peer, s *schedule, h peers.Config, now time.Time) time.Time {
	if p.Health().AdminState() == peers.Maintenance {
		s.death = 0
		return time.Time{}
	}
	switch p.Health().State() {
	case peers.Unknown:
		if s.next.IsZero() {
			return now
		}
		return s.next
	case peers.Dead:
		if d := p.Health().Deaths(); d != s.death {
			// A new death: the back-off starts over.
			s.death = d
			s.delay = NextDelay(h.ProbeInterval, h.ProbeMaxInterval, 0, 0)
			return p.Health().DeadSince().Add(s.delay)
		}
		if s.next.IsZero() {
			return now.Add(s.delay)
		}
		return s.next
	default: // Alive
		s.death = 0
		if p.Health().NoNextHop() && p.Health().ProbeKind() == "http" {
			// Cut off by its own word that it has no usable next hop:
			// its probe's answer says when it has one again, asked
			// every noNextHopEvery.
			if s.lastProbe.IsZero() {
				return now
			}
			return s.lastProbe.Add(noNextHopEvery)
		}
		if p.Health().Suspect() {
			// Failed (or too slow) connects below the limit. Traffic now
			// avoids the peer, so probes settle it: the first at once, the
			// next probe_interval/10 later, doubling up to probe_interval.
			// A success clears it; a peer that keeps refusing reaches
			// connect_fail_limit in seconds without waiting for client
			// requests to fail on it; and a parent that restarts (a few
			// seconds of refused connects) is not declared dead by a
			// burst of back-to-back probes — an operator reads
			// connect_fail_limit as that many failures of traffic, not
			// ten probes in ten milliseconds.
			if s.settling == 0 || s.lastProbe.IsZero() || p.Health().Hung() {
				// A peer whose connects hang is probed back to back:
				// live requests no longer dial it (Peer.BeginDial), so
				// only probes settle it, and each one waits out a
				// connect timeout of its own — no burst.
				return now
			}
			return s.lastProbe.Add(settleDelay(h.ProbeInterval, s.settling))
		}
		s.settling = 0
		if h.IdleProbe <= 0 {
			return time.Time{}
		}
		last := p.Health().LastUsed()
		if ls := p.Health().LastSuccess(); ls.After(last) {
			last = ls
		}
		if s.lastProbe.After(last) {
			last = s.lastProbe
		}
		return last.Add(h.IdleProbe)
	}
}

// noNextHopEvery is how often a parent cut off for want of a next hop of
// its own is probed: its children send to it again within about this of
// its recovery.
const noNextHopEvery = time.Second

// settleDelay is the wait before the n-th settling probe after the first
// (n >= 1): interval/10, doubling, at most interval.
func settleDelay(interval time.Duration, n int) time.Duration {
	d := interval / 10
	for i := 1; i < n && d < interval; i++ {
		d *= 2
	}
	return min(d, interval)
}

// startLocked starts a background probe of p.
func (pr *Prober) startLocked(ctx context.Context, p *peers.Peer, s *schedule) {
	s.probing, s.background, s.startedAt = make(chan struct{}), true, p.Health().Deaths()
	pr.wg.Add(1)
	go func() {
		defer pr.wg.Done()
		pr.probeByKind(ctx, p)
		select {
		case pr.done <- p:
		case <-ctx.Done():
			pr.mu.Lock()
			pr.endLocked(s)
			pr.mu.Unlock()
		}
	}()
}

// endLocked marks the probe in flight ended.
func (pr *Prober) endLocked(s *schedule) {
	close(s.probing)
	s.probing, s.background = nil, false
}

// finished re-arms the back-off after a background probe.
func (pr *Prober) finished(p *peers.Peer, now time.Time) {
	h := pr.reg.Health()
	pr.mu.Lock()
	defer pr.mu.Unlock()
	s := pr.sched[p]
	if s == nil || s.probing == nil {
		return
	}
	pr.endLocked(s)
	s.lastProbe = now
	s.next = time.Time{}
	if p.Health().State() != peers.Dead {
		if p.Health().Suspect() {
			s.settling++
		} else {
			s.settling = 0
		}
		return
	}
	s.settling = 0
	if p.Health().HeldProbes() > 0 {
		// A flapping peer's good probe was held: the next one follows
		// probe_interval later, not backed off (flap damping counts good
		// probes in a row).
		s.death = p.Health().Deaths()
		s.next = now.Add(h.ProbeInterval)
		return
	}
	if d := p.Health().Deaths(); d == s.startedAt {
		// A re-probe of the same death failed: back off.
		s.death = d
		s.delay = NextDelay(h.ProbeInterval, h.ProbeMaxInterval, s.delay, pr.jitter())
		s.next = now.Add(s.delay)
	} else {
		// This probe gave the verdict (or the peer died meanwhile): the
		// first re-probe is probe_interval after the death.
		s.death = d
		s.delay = NextDelay(h.ProbeInterval, h.ProbeMaxInterval, 0, 0)
		s.next = p.Health().DeadSince().Add(s.delay)
	}
}

// probeByKind runs the probe p needs: an HTTP probe for a parent dead by
// answers (or suspected of answering badly), a TCP probe otherwise.
func (pr *Prober) probeByKind(ctx context.Context, p *peers.Peer) error {
	if p.Health().ProbeKind() == "http" {
		return pr.httpProbe(ctx, p)
	}
	return pr.probe(ctx, p)
}

// probe runs one TCP probe: connect, write nothing, close.
func (pr *Prober) probe(ctx context.Context, p *peers.Peer) error {
	conn, err := pr.dialer.DialPeer(ctx, p, dialer.Probe, 0)
	if err != nil {
		pr.log.WithFields(logrus.Fields{"peer": p.Name(), "err": err.Error()}).Debug("probe failed")
		return err
	}
	return conn.Close()
}

// ProbeNow probes the named peer at once (waiting for a probe already in
// flight to finish first) and returns the peer with its updated state.
func (pr *Prober) ProbeNow(ctx context.Context, name string) (*peers.Peer, error) {
	p := pr.reg.Get(name)
	if p == nil {
		return nil, fmt.Errorf("%w %q", peers.ErrUnknownPeer, name)
	}
	for {
		pr.mu.Lock()
		s := pr.scheduleLocked(p)
		busy := s.probing
		if busy == nil {
			s.probing = make(chan struct{})
			pr.mu.Unlock()
			break
		}
		pr.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	err := pr.probeByKind(ctx, p)
	pr.mu.Lock()
	pr.endLocked(pr.scheduleLocked(p))
	pr.mu.Unlock()
	pr.kick(p)
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return p, nil
}

// kick wakes the scheduler after an on-demand probe of p (a probe it
// skipped meanwhile may be due).
func (pr *Prober) kick(p *peers.Peer) {
	pr.mu.Lock()
	if len(pr.kicked) < 1024 {
		pr.kicked = append(pr.kicked, p)
	} else {
		pr.kickedAll = true
	}
	pr.mu.Unlock()
	select {
	case pr.wakeup <- struct{}{}:
	default:
	}
}
