package peers

// This file holds a parent's health per destination: the destinations it
// said it could not reach (its own next hop failed: internal/nexthop), in
// destFailLimit answers in a row with no complete answer for it between,
// each avoided in plans until a background probe through the parent to it
// succeeds — never a live request sent to see. The table is bounded per
// parent (maxDests, the oldest mark forgotten first; a mark no request
// asked for in destIdle is forgotten too), lives on the peer's health
// part, so a reload keeps it, and is read lock-free by every plan.

import (
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// maxDests bounds the destinations kept per parent: a client that
	// asks for a million hosts no parent reaches costs each parent this
	// many marks (about 200 bytes each), never more.
	maxDests = 256
	// destIdle: a mark no request asked for this long is forgotten.
	destIdle = 10 * time.Minute
	// A destination is probed destProbeFirst after it was marked, then
	// backed off, doubling, to destProbeMax.
	destProbeFirst = time.Second
	destProbeMax   = 8 * time.Second
	// destProbeRate bounds the destination probes through one parent
	// (per second), whatever the number of marks.
	destProbeRate = 4
	// destFailLimit: a destination is marked after this many answers in
	// a row saying the request never reached it (a complete answer for
	// it between starts the count over): one refused connect in many is
	// a flaky path, not one the parent lacks.
	destFailLimit = 3
	// maxPending bounds the destinations counted towards destFailLimit.
	maxPending = 1024
)

// Dest is one destination a parent cannot reach, as operators read it.
type Dest struct {
	Destination string    `json:"destination"` // its host
	Since       time.Time `json:"since"`
	Cause       string    `json:"cause"` // what the parent said (an error type, Squid's error id, no-peers)
	NextProbe   time.Time `json:"next_probe"`
	Probes      int       `json:"probes"` // probes through the parent that found it still unreachable
}

// destMark is one destination a parent cannot reach.
type destMark struct {
	target string // what a probe asks: scheme://host:port, or host:port (a tunnel)
	Dest
	seq   int64         // marking order (the oldest is forgotten first)
	delay time.Duration // the probe back-off
	busy  bool          // a probe of it is in flight
	asked atomic.Int64  // Unix ns a plan last left the parent out for it
}

// destSet is the marks as plans read them: sorted hashes, with the mark
// of each.
type destSet struct {
	hashes []uint64
	marks  []*destMark
}

// reach is a parent's marks.
type reach struct {
	set atomic.Pointer[destSet] // nil: none (the plans' fast path)
	// total counts the marks ever made (peerd_peer_unreachable_total).
	total atomic.Int64

	// pendingN counts the destinations with answers saying they were not
	// reached, short of destFailLimit: while there are none, a complete
	// answer costs nothing here.
	pendingN atomic.Int32

	mu sync.Mutex // guards the rest
	// pending counts the answers in a row, by destination (OriginHash of
	// its host), saying the request never reached it.
	pending map[uint32]int
	marks   map[uint64]*destMark
	// order is the marks in the order they were made, the oldest first;
	// an entry whose mark was cleared (or made again) since is passed by
	// when its turn comes.
	order  []ordered
	seq    int64
	tokens float64 // destination probes allowed now (destProbeRate)
	refill time.Time
}

// ordered is one mark in the order they were made.
type ordered struct {
	hash uint64
	seq  int64
}

// DestHash is what a destination is matched on: its host, lowercase,
// hashed (FNV-1a, 64 bits).
func DestHash(host string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(host); i++ {
		c := host[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h
}

// destHost is the host of a destination as the engine gives it
// (scheme://host:port, or host:port).
func destHost(dest string) string {
	hp := dest
	if i := strings.Index(dest, "://"); i >= 0 {
		hp = dest[i+3:]
	}
	if h, _, err := net.SplitHostPort(hp); err == nil {
		return strings.ToLower(h)
	}
	return strings.ToLower(hp)
}

// Reaches reports whether the parent may be sent a request for the
// destination whose host hashes to h (DestHash): true unless it said it
// cannot reach it and no probe has found it back since.
func (h *Health) Reaches(dest uint64) bool {
	s := h.reach.set.Load()
	if s == nil {
		return true
	}
	i, found := slices.BinarySearch(s.hashes, dest)
	if !found {
		return true
	}
	s.marks[i].asked.Store(time.Now().UnixNano())
	return false
}

// unreached counts an answer saying a request for dest never reached it
// (why: what it said), and marks the parent unable to reach dest at the
// destFailLimit-th in a row; it reports whether a mark is new. The
// oldest mark goes when the table is full.
func (r *reach) unreached(dest, why string, at time.Time) bool {
	host := destHost(dest)
	if host == "" {
		return false
	}
	k := DestHash(host)
	r.mu.Lock()
	defer r.mu.Unlock()
	if m := r.marks[k]; m != nil {
		m.target, m.Cause = dest, why // a later word (its latest scheme and port for the probe)
		return false
	}
	o := OriginHash([]byte(host))
	if r.pending == nil || len(r.pending) >= maxPending {
		r.pending = map[uint32]int{} // (bounded: a flood starts every count over)
	}
	if r.pending[o]++; r.pending[o] < destFailLimit {
		r.pendingN.Store(int32(len(r.pending)))
		return false
	}
	delete(r.pending, o)
	r.pendingN.Store(int32(len(r.pending)))
	return r.markLocked(k, host, dest, why, at)
}

// answered hears a complete answer for the destination whose host hashes
// to origin (OriginHash): its count towards destFailLimit starts over.
func (r *reach) answered(origin uint32) {
	if r.pendingN.Load() == 0 || origin == 0 {
		return
	}
	r.mu.Lock()
	if _, ok := r.pending[origin]; ok {
		delete(r.pending, origin)
		r.pendingN.Store(int32(len(r.pending)))
	}
	r.mu.Unlock()
}

// markLocked marks the parent unable to reach dest (k: its host's
// DestHash); it reports whether the mark is new.
func (r *reach) markLocked(k uint64, host, dest, why string, at time.Time) bool {
	if r.marks == nil {
		r.marks = map[uint64]*destMark{}
	}
	for len(r.marks) >= maxDests && len(r.order) > 0 {
		o := r.order[0]
		r.order = r.order[1:]
		if m := r.marks[o.hash]; m != nil && m.seq == o.seq {
			r.forgetLocked(o.hash)
		}
	}
	r.seq++
	m := &destMark{target: dest, seq: r.seq, delay: destProbeFirst,
		Dest: Dest{Destination: host, Since: at, Cause: why, NextProbe: at.Add(destProbeFirst)}}
	m.asked.Store(at.UnixNano())
	r.marks[k] = m
	if len(r.order) >= 2*maxDests {
		// Passed-by entries pile up as marks are cleared: the live
		// ones, in their order, are kept.
		live := r.order[:0:0]
		for _, o := range r.order {
			if m := r.marks[o.hash]; m != nil && m.seq == o.seq {
				live = append(live, o)
			}
		}
		r.order = live
	}
	r.order = append(r.order, ordered{k, m.seq})
	r.total.Add(1)
	// The plans' set, with k in its place.
	old := r.set.Load()
	ns := &destSet{}
	if old != nil {
		i, _ := slices.BinarySearch(old.hashes, k)
		ns.hashes = slices.Insert(slices.Clone(old.hashes), i, k)
		ns.marks = slices.Insert(slices.Clone(old.marks), i, m)
	} else {
		ns.hashes, ns.marks = []uint64{k}, []*destMark{m}
	}
	r.set.Store(ns)
	return true
}

// forgetLocked drops the mark of k, from the table and the plans' set.
func (r *reach) forgetLocked(k uint64) {
	delete(r.marks, k)
	old := r.set.Load()
	if old == nil {
		return
	}
	i, found := slices.BinarySearch(old.hashes, k)
	if !found {
		return
	}
	if len(old.hashes) == 1 {
		r.set.Store(nil)
		return
	}
	r.set.Store(&destSet{hashes: slices.Delete(slices.Clone(old.hashes), i, i+1), marks: slices.Delete(slices.Clone(old.marks), i, i+1)})
}

// clear forgets dest: a probe through the parent reached it. It reports
// whether there was a mark.
func (r *reach) clear(dest string) (Dest, bool) {
	k := DestHash(destHost(dest))
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.marks[k]
	if m == nil {
		return Dest{}, false
	}
	r.forgetLocked(k)
	return m.Dest, true
}

// probed records a probe of dest that found it still unreachable: the
// next one is backed off.
func (r *reach) probed(dest string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m := r.marks[DestHash(destHost(dest))]; m != nil {
		m.busy = false
		m.Probes++
		m.delay = min(2*m.delay, destProbeMax)
		m.NextProbe = at.Add(m.delay)
	}
}

// DueDestinations returns the destinations to probe through the parent
// now (at most what destProbeRate allows, none already being probed),
// marked busy until their outcome is observed (DestProbed); marks no
// request asked for in destIdle are forgotten on the way.
func (h *Health) DueDestinations(now time.Time) []string {
	r := &h.reach
	if r.set.Load() == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.refill.IsZero() {
		r.tokens = min(destProbeRate, r.tokens+now.Sub(r.refill).Seconds()*destProbeRate)
	} else {
		r.tokens = destProbeRate
	}
	r.refill = now
	var due []*destMark
	for k, m := range r.marks {
		if now.Sub(time.Unix(0, m.asked.Load())) > destIdle && !m.busy {
			r.forgetLocked(k)
			continue
		}
		if !m.busy && !now.Before(m.NextProbe) {
			due = append(due, m)
		}
	}
	slices.SortFunc(due, func(a, b *destMark) int { return a.NextProbe.Compare(b.NextProbe) })
	var out []string
	for _, m := range due {
		if r.tokens < 1 {
			break
		}
		r.tokens--
		m.busy = true
		out = append(out, m.target)
	}
	return out
}

// unreachable is the marks for operators, the oldest first.
func (r *reach) unreachable() []Dest {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Dest, 0, len(r.marks))
	for _, m := range r.marks {
		out = append(out, m.Dest)
	}
	slices.SortFunc(out, func(a, b Dest) int { return a.Since.Compare(b.Since) })
	return out
}
