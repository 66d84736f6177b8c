package peers

// This file holds parents judged against each other (contract section
// 21): each parent's recent response-head times, its share of new
// requests scaled by how they compare with the other live parents of its
// group (the same route and tier), and outliers — a parent far slower
// than its peers is suspect until its HTTP probes show it back within the
// factor. An origin slow on every parent alike moves nothing: only the
// ratio to the peers' times counts.

import (
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
)

// CauseOutlier is the history cause of a parent turned suspect for being
// an outlier.
const CauseOutlier = "outlier"

const (
	// relWindow: a parent's recent times are those of the last 10 s.
	relWindow = 10 * time.Second
	// relMinSamples: a parent is compared once it has this many recent
	// times (and only with peers that have as many).
	relMinSamples = 5
	// relRing bounds the recent times kept per parent.
	relRing = 256
	// shareTolerance: within this ratio of its peers' median a parent
	// keeps its full share (noise is not slowness).
	shareTolerance = 1.25
	// shareFloor: a slow parent keeps at least this share, so its times
	// go on being measured.
	shareFloor = 0.05
	// outlierProbeFloor: an outlier's HTTP probe counts as back within
	// the factor when it answered within factor x its peers' median, or
	// within this, whichever is longer.
	outlierProbeFloor = 20 * time.Millisecond
	// relMinGap: a parent's median must exceed its peers' by at least
	// this to count as slower at all; a few milliseconds between loopback
	// or LAN parents is scheduling noise, whatever the ratio.
	relMinGap = 10 * time.Millisecond
	// outlierMinGap: a parent is made suspect (an outlier) only when it is
	// slower than its peers by at least this, whatever the ratio. Below
	// it the difference is no slowness a client notices — a quarter of
	// the 100 ms under which an answer feels immediate — while a busy
	// host's own scheduling moves a parent's median by tens of
	// milliseconds (20 ms beside its peers' 5.7 ms, a ratio of 3.5, was
	// measured on a host with both cores busy). It keeps a share
	// reduced by a smaller gap (relMinGap), never suspect.
	outlierMinGap = 25 * time.Millisecond
	// probationShare is the share of a parent just revived from being an
	// outlier, until its own answers are measured again: its probe may
	// not see what its answers showed (a Squid answers OPTIONS itself,
	// fast, while its way to the origin is slow).
	probationShare = 0.5
)

// timedHeads are a parent's last response-head times with when they came;
// they live in answerStats, under its lock (one lock per answer).
type timedHeads struct {
	at   [relRing]int64  // Unix ns
	d    [relRing]int64  // ns
	org  [relRing]uint32 // the origin's hash (OriginHash; 0: not known)
	next int
	n    int
}

func (h *timedHeads) add(at time.Time, d time.Duration, origin uint32) {
	h.at[h.next], h.d[h.next], h.org[h.next] = at.UnixNano(), int64(d), origin
	h.next = (h.next + 1) % relRing
	h.n++
}

// recentHeads is what Judge last made of a parent's recent times.
type recentHeads struct {
	// median is the recent median head time (ns), 0 with too few; share
	// the factor in force (float64 bits, 1 = normal; 0 bits also mean 1);
	// bound an outlier's probe bound (ns).
	median atomic.Int64
	share  atomic.Uint64
	bound  atomic.Int64
	// probation: revived from being an outlier and not yet measured
	// again; its share stays probationShare until it is. revivedAt is
	// when (Unix ns); strikes counts outlier marks each within relWindow
	// of the revival before; holdUntil (Unix ns) is when its probes may
	// revive it again.
	probation atomic.Bool
	revivedAt atomic.Int64
	strikes   atomic.Int32
	holdUntil atomic.Int64
	// marks are when it was last marked an outlier (Unix ns; matched.go).
	marks [outlierMarks]atomic.Int64
}

// clearRecent forgets p's recent times (a parent back from being an
// outlier starts afresh).
func (h *Health) clearRecent() {
	h.answers.mu.Lock()
	h.answers.timed.n, h.answers.timed.next = 0, 0
	h.answers.mu.Unlock()
	h.recent.median.Store(0)
}

// medianSince is the median of p's times at or after since, and their
// count; 0 with fewer than relMinSamples.
func (h *Health) medianSince(since int64, buf []int64) (int64, int, []int64) {
	a := &h.answers
	a.mu.Lock()
	buf = buf[:0]
	for i := 0; i < min(a.timed.n, relRing); i++ {
		if a.timed.at[i] >= since {
			buf = append(buf, a.timed.d[i])
		}
	}
	a.mu.Unlock()
	if len(buf) < relMinSamples {
		return 0, len(buf), buf
	}
	slices.Sort(buf)
	return buf[len(buf)/2], len(buf), buf
}

// LatencyShare is the factor the peer's share of new requests is scaled
// by (1: normal).
func (h *Health) LatencyShare() float64 {
	b := h.recent.share.Load()
	if b == 0 {
		return 1
	}
	return math.Float64frombits(b)
}

// Judge compares the parents now: each one's recent median, its share,
// and whether it is an outlier. It runs on a ticker (cmd/peerd) and in
// tests with their own clock.
func (r *Registry) Judge(now time.Time) {
	h := r.opts.Load().Health
	matched := r.opts.Load().Matched
	// The parents are compared over one period: the last relWindow, or
	// since the latest revival of a parent from being an outlier (its
	// older times are gone), so that a shift every parent shares (an
	// origin turning slow) reaches every median alike.
	since := now.Add(-relWindow).UnixNano()
	var buf []int64
	var parents []*Peer
	for _, p := range r.Peers() {
		if p.Type() != Parent {
			continue
		}
		parents = append(parents, p)
		if rv := p.health.recent.revivedAt.Load(); rv > since && p.health.State() == Alive && !p.health.Suspect() {
			since = rv
		}
	}
	for _, p := range parents {
		var m int64
		m, _, buf = p.health.medianSince(since, buf)
		p.health.recent.median.Store(m)
	}
	share := make(map[*Peer]float64, len(parents))
	type worst struct {
		ratio float64
		peers int64 // the peers' median, ns
	}
	out := map[*Peer]worst{}
	bounds := map[*Peer]int64{}
	for _, g := range r.groupsOf(parents) {
		for _, tier := range byTier(g) {
			// Compared: the healthy parents with recent times (a
			// suspect one's times are stale: it gets no traffic).
			var live []*Peer
			for _, p := range tier {
				if p.health.State() == Alive && !p.health.Suspect() && p.health.recent.median.Load() > 0 {
					live = append(live, p)
				}
			}
			if h.OutlierFactor > 0 && len(live) > 0 {
				// An outlier's probe bound follows its peers' times now.
				ms := make([]int64, 0, len(live))
				for _, q := range live {
					ms = append(ms, q.health.recent.median.Load())
				}
				pm := medianOf(ms)
				for _, p := range tier {
					if p.health.Outlier() {
						b := int64(max(time.Duration(h.OutlierFactor*float64(pm)), outlierProbeFloor))
						bounds[p] = max(bounds[p], b)
					}
				}
			}
			if len(live) < 2 {
				continue
			}
			var origins map[*Peer]map[uint32][]int64
			if matched {
				origins = make(map[*Peer]map[uint32][]int64, len(live))
				for _, p := range live {
					origins[p] = p.health.byOrigin(since)
				}
			}
			for _, p := range live {
				var ratio float64
				var pm int64
				if matched {
					var theirs []map[uint32][]int64
					for _, q := range live {
						if q != p {
							theirs = append(theirs, origins[q])
						}
					}
					var ok bool
					if ratio, pm, ok = matchedRatio(p, origins[p], theirs); !ok {
						continue // too little asked of p that its peers are asked too
					}
				} else {
					others := make([]int64, 0, len(live)-1)
					for _, q := range live {
						if q != p {
							others = append(others, q.health.recent.median.Load())
						}
					}
					if pm = medianOf(others); pm <= 0 {
						continue
					}
					ratio = float64(p.health.recent.median.Load()) / float64(pm)
					if time.Duration(p.health.recent.median.Load()-pm) < relMinGap {
						ratio = 1 // within the noise: as fast as its peers
					}
				}
				s := shareFor(ratio)
				if cur, ok := share[p]; !ok || s < cur {
					share[p] = s
				}
				if w := out[p]; ratio > w.ratio {
					out[p] = worst{ratio, pm}
				}
			}
		}
	}
	for _, p := range parents {
		s := 1.0
		if p.health.recent.median.Load() > 0 {
			p.health.recent.probation.Store(false) // measured again
		}
		if h.RelativeLatency {
			if v, ok := share[p]; ok {
				s = v
			} else if p.health.recent.probation.Load() {
				s = probationShare
			}
		}
		p.health.recent.share.Store(math.Float64bits(s))
	}
	for p, b := range bounds {
		p.health.recent.bound.Store(b)
	}
	for p, w := range out {
		// Suspect only past the factor and by outlierMinGap: the ratio of
		// two small times is no slowness a client would notice.
		gap := time.Duration((w.ratio - 1) * float64(w.peers))
		if h.OutlierFactor > 0 && w.ratio > h.OutlierFactor && gap >= outlierMinGap {
			r.markOutlier(p, h, w.ratio, time.Duration(w.peers), now)
		}
	}
	if h.OutlierFactor == 0 {
		for _, p := range parents {
			if p.health.Outlier() {
				r.clearOutlier(p, now, "outlier_factor is off")
			}
		}
	}
}

// medianOf is the median of ms (sorted in place; the mean of the middle
// two for an even count).
func medianOf(ms []int64) int64 {
	slices.Sort(ms)
	m := ms[len(ms)/2]
	if len(ms)%2 == 0 {
		m = (ms[len(ms)/2-1] + ms[len(ms)/2]) / 2
	}
	return m
}

// shareFor is the share of a parent ratio times as slow as its peers:
// full within shareTolerance, then falling with the square of the ratio
// (twice as slow: 0.39; three times: 0.17), never under shareFloor.
func shareFor(ratio float64) float64 {
	if ratio <= shareTolerance {
		return 1
	}
	return max(shareFloor, (shareTolerance/ratio)*(shareTolerance/ratio))
}

// groupsOf is the parents by group: each configured route's (Options
// Groups), and all of them. Parents are compared within a group and a
// tier.
func (r *Registry) groupsOf(parents []*Peer) [][]*Peer {
	out := [][]*Peer{parents}
	gs := r.opts.Load().Groups
	if gs == nil {
		return out
	}
	byName := make(map[string]*Peer, len(parents))
	for _, p := range parents {
		byName[p.Name()] = p
	}
	for _, names := range gs {
		var g []*Peer
		for _, n := range names {
			if p := byName[n]; p != nil {
				g = append(g, p)
			}
		}
		if len(g) > 1 {
			out = append(out, g)
		}
	}
	return out
}

// byTier splits a group by tier.
func byTier(g []*Peer) [][]*Peer {
	tiers := map[int][]*Peer{}
	var order []int
	for _, p := range g {
		t := p.Tier()
		if _, ok := tiers[t]; !ok {
			order = append(order, t)
		}
		tiers[t] = append(tiers[t], p)
	}
	out := make([][]*Peer, 0, len(order))
	for _, t := range order {
		out = append(out, tiers[t])
	}
	return out
}

// markOutlier makes an alive, healthy parent suspect for being ratio
// times as slow as its peers (their median peers), unless that would
// leave more than max_answer_dead of the parents out for answers or
// outliers. Its HTTP probes then measure it.
func (r *Registry) markOutlier(p *Peer, h Config, ratio float64, peers time.Duration, now time.Time) {
	cur := p.health.row.Load()
	if cur.state != Alive || cur.suspect || cur.outlier {
		return
	}
	if !r.mayTakeOut(p, h, true) || p.health.markedRecently(now) {
		return
	}
	p.health.recent.bound.Store(int64(max(time.Duration(h.OutlierFactor*float64(peers)), outlierProbeFloor)))
	// An outlier again soon after its probe revived it: its probe does
	// not see what its answers show, so each such strike holds the next
	// revival back longer (2 s, 4 s, ... up to probe_max_interval).
	var hold time.Duration
	if rv := p.health.recent.revivedAt.Load(); rv != 0 && now.UnixNano()-rv < int64(relWindow) {
		k := min(p.health.recent.strikes.Add(1), 16)
		hold = min(time.Second<<k, max(h.ProbeMaxInterval, time.Second))
	} else {
		p.health.recent.strikes.Store(0)
	}
	p.health.recent.holdUntil.Store(now.Add(hold).UnixNano())
	detail := fmt.Sprintf("recent median response head %s is %.1f x its peers' %s (outlier_factor %g)",
		time.Duration(p.health.recent.median.Load()).Round(time.Millisecond/10), ratio, peers.Round(time.Millisecond/10), h.OutlierFactor)
	if !r.change(p, func(l *liveness) bool {
		if l.state != Alive || l.suspect {
			return false
		}
		l.suspect, l.httpSettle, l.outlier = true, true, true
		return true
	}, suspected(now, CauseOutlier, detail)) {
		return
	}
	r.log.WithFields(logrus.Fields{"peer": p.Name(), "cause": CauseOutlier, "ratio": math.Round(ratio*10) / 10}).
		Warnf("%s %s is suspect: %s; probing it", p.Type().Label(), p.Name(), detail)
}

// clearOutlier ends p's outlier suspicion (how says why); its recent
// times start afresh.
func (r *Registry) clearOutlier(p *Peer, at time.Time, how string) {
	if !r.change(p, func(l *liveness) bool {
		if !l.outlier {
			return false
		}
		l.outlier, l.suspect, l.httpSettle, l.suspectBy = false, false, false, ""
		return true
	}, func(*row) *Transition {
		return &Transition{At: at, From: "suspect", To: Alive.String(), Cause: CauseProbe, Error: how}
	}) {
		return
	}
	p.health.clearRecent()
	p.health.recent.share.Store(math.Float64bits(probationShare))
	p.health.recent.probation.Store(true)
	p.health.recent.revivedAt.Store(at.UnixNano())
	r.logSuspicion(p, at, false, CauseProbe, how)
}

// outlierHeld reports whether an outlier's revival is held back at at
// (markOutlier's strikes).
func (h *Health) outlierHeld(at time.Time) bool { return at.UnixNano() < h.recent.holdUntil.Load() }

// OutlierBound is how fast an outlier's HTTP probe must answer to count
// as back within outlier_factor (0: the peer is no outlier).
func (h *Health) OutlierBound() time.Duration {
	if !h.row.Load().outlier {
		return 0
	}
	return time.Duration(h.recent.bound.Load())
}
