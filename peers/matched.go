package peers

// This file holds parents judged origin by origin, for the hashing
// policies (carp, sourcehash): there the parents are not asked the same
// URLs, so their overall medians say as much about the origins each was
// given as about the parents. One client repeating a URL of a slow origin
// it controls made that URL's parent an outlier, the URL moved to the
// next parent, which became the next outlier, and so on. Compared origin
// by origin — a parent's times for an origin against its peers' times
// for the same origin — a parent is judged only on what its peers are
// also asked; an origin only one parent is asked for moves nothing, and
// no one origin decides (the median over the origins matched does).

import (
	"slices"
	"time"
)

const (
	// matchMinSamples: an origin counts for a parent (and a peer) with at
	// least this many recent times.
	matchMinSamples = 3
	// matchMinOrigins: a parent is compared once this many origins match.
	matchMinOrigins = 3
	// outlierMarks outlier marks at most per parent per outlierMarkWindow
	// (a parent slow again after its revival is marked again at once; one
	// that keeps flipping is not, whatever makes it flip).
	outlierMarks      = 3
	outlierMarkWindow = time.Minute
)

// OriginHash is what an answer's origin is matched on: FNV-1a of its
// host, never 0 (0 is "not known").
func OriginHash(host []byte) uint32 {
	h := uint32(2166136261)
	for _, c := range host {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		h = (h ^ uint32(c)) * 16777619
	}
	if h == 0 {
		h = 1
	}
	return h
}

// byOrigin is p's times at or after since, by origin (known origins only).
func (h *Health) byOrigin(since int64) map[uint32][]int64 {
	a := &h.answers
	out := map[uint32][]int64{}
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := 0; i < min(a.timed.n, relRing); i++ {
		if o := a.timed.org[i]; o != 0 && a.timed.at[i] >= since {
			out[o] = append(out[o], a.timed.d[i])
		}
	}
	return out
}

// matchedRatio compares p with its peers origin by origin: for each
// origin p and a peer both answered matchMinSamples times, p's median
// over the peers' (1 within relMinGap of them); the median of those
// ratios, and of the peers' medians, when matchMinOrigins origins match.
func matchedRatio(p *Peer, mine map[uint32][]int64, peers []map[uint32][]int64) (ratio float64, peersMedian int64, ok bool) {
	var ratios []float64
	var pms []int64
	for o, ds := range mine {
		if len(ds) < matchMinSamples {
			continue
		}
		var theirs []int64
		for _, q := range peers {
			if qd := q[o]; len(qd) >= matchMinSamples {
				theirs = append(theirs, medianOf(slices.Clone(qd)))
			}
		}
		if len(theirs) == 0 {
			continue
		}
		pm, m := medianOf(theirs), medianOf(slices.Clone(ds))
		r := 1.0
		if pm > 0 && time.Duration(m-pm) >= relMinGap {
			r = float64(m) / float64(pm)
		}
		ratios, pms = append(ratios, r), append(pms, pm)
	}
	if len(ratios) < matchMinOrigins {
		return 0, 0, false
	}
	slices.Sort(ratios)
	return ratios[len(ratios)/2], medianOf(pms), true
}

// markedRecently reports whether p was marked an outlier outlierMarks
// times within outlierMarkWindow before now; if not, now is noted as a
// mark. Judge alone calls it.
func (h *Health) markedRecently(now time.Time) bool {
	oldest := &h.recent.marks[0]
	for i := range h.recent.marks {
		if h.recent.marks[i].Load() < oldest.Load() {
			oldest = &h.recent.marks[i]
		}
	}
	if at := oldest.Load(); at != 0 && now.UnixNano()-at < int64(outlierMarkWindow) {
		return true
	}
	oldest.Store(now.UnixNano())
	return false
}
