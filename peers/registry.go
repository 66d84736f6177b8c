// Package peers is peerd's peer registry: each configured peer's liveness,
// admin state and counters, and the one place where connect outcomes become
// state changes. It does no network I/O and knows nothing of HTTP.
//
// A peer dies after connect_fail_limit consecutive connect failures and is
// revived only by a successful probe: no client request is ever used to find
// out whether a dead peer is back (Squid removed that behaviour for idle dead
// peers because it hung real requests on truly dead peers).
package peers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	memdb "github.com/hashicorp/go-memdb"
	"github.com/sirupsen/logrus"
)

// ErrUnknownPeer is returned for a name no configured peer has.
var ErrUnknownPeer = errors.New("unknown peer")

// Options configure a Registry.
type Options struct {
	Health Config
	// ConnectTimeout is the default for peers without their own ([proxy]
	// connect_timeout).
	ConnectTimeout time.Duration
	// ReadTimeout is [proxy] read_timeout: the automatic first-byte
	// timeout never exceeds it.
	ReadTimeout time.Duration
	// Groups are the peer names of each [[route]]: the parents judged
	// against each other besides all of them (relative.go).
	Groups [][]string
	// Matched: parents are compared origin by origin, as a hashing
	// policy (carp, sourcehash) asks them (matched.go).
	Matched bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log receives state changes; nil means the standard logrus logger.
	Log logrus.FieldLogger
}

// Registry holds the peers. Reads are lock-free; transitions are memdb write
// transactions, and exactly one goroutine wins each.
type Registry struct {
	db  *memdb.MemDB
	now func() time.Time
	log logrus.FieldLogger

	// set is the current peer set; replaced, never edited.
	set  atomic.Pointer[Set]
	opts atomic.Pointer[Options]
	// timings are the metrics' per-peer histograms (timings.go).
	timings atomic.Pointer[Timings]

	// reconcileMu serialises Reconcile calls with each other.
	reconcileMu sync.Mutex
	started     bool // the first Reconcile (New) is done: later ones are reloads

	overrides overrides
	subs      subscribers // the change feeds (changes.go)
}

// New builds a registry with the given peers, all Unknown.
func New(opts Options, specs []Spec) (*Registry, error) {
	db, err := memdb.NewMemDB(schema())
	if err != nil {
		return nil, fmt.Errorf("peers: schema: %w", err)
	}
	r := &Registry{db: db, now: opts.Now, log: opts.Log}
	if r.now == nil {
		r.now = time.Now
	}
	if r.log == nil {
		r.log = logrus.StandardLogger()
	}
	r.set.Store(&Set{})
	if err := r.Reconcile(opts, specs); err != nil {
		return nil, err
	}
	return r, nil
}

// Set is one generation of the configured peers, in config order. A reload
// makes a new Set and a Set never changes, so its identity tells a cache
// built from it whether it is current.
type Set struct {
	List []*Peer
	// ICP is the peers of List with an icp_port, in the same order: what
	// every GET asks about, usually none.
	ICP []*Peer
}

// Set returns the current peer set.
func (r *Registry) Set() *Set { return r.set.Load() }

// Peers returns the peers in config order. The slice must not be modified.
func (r *Registry) Peers() []*Peer { return r.set.Load().List }

// Get returns the peer with the given name, or nil.
func (r *Registry) Get(name string) *Peer {
	txn := r.db.Txn(false)
	raw, err := txn.First(tablePeers, indexID, name)
	if err != nil || raw == nil {
		return nil
	}
	return raw.(*row).Peer
}

// Health returns the [health] config in force.
func (r *Registry) Health() Config { return r.opts.Load().Health }

// Filter selects peers in List; nil fields match everything.
type Filter struct {
	State *State
	Type  *Type
}

// List returns snapshots of the peers matching f, in config order. Each
// snapshot's liveness is the one its row was found by, so a listed peer's
// state always matches the filter.
func (r *Registry) List(f Filter) []Snapshot {
	txn := r.db.Txn(false)
	var it memdb.ResultIterator
	var err error
	if f.State != nil {
		it, err = txn.Get(tablePeers, indexState, f.State.String())
	} else {
		it, err = txn.Get(tablePeers, indexOrder)
	}
	if err != nil {
		// The schema is static; this cannot happen.
		panic(fmt.Sprintf("peers: list: %v", err))
	}
	var rows []*row
	for raw := it.Next(); raw != nil; raw = it.Next() {
		rw := raw.(*row)
		if f.Type == nil || rw.Type == f.Type.String() {
			rows = append(rows, rw)
		}
	}
	// The state index orders by name; the API promises config order.
	slices.SortFunc(rows, func(a, b *row) int { return cmp.Compare(a.Order, b.Order) })
	out := make([]Snapshot, len(rows))
	for i, rw := range rows {
		out[i] = rw.Peer.health.snapshot(rw)
	}
	return out
}

// Watch returns a channel that is closed at the next change of any peer's
// row: a state transition, an admin state change or a reload. Subscribers
// (the prober, metrics, caches) wait on it instead of polling.
func (r *Registry) Watch() <-chan struct{} {
	txn := r.db.Txn(false)
	it, err := txn.Get(tablePeers, indexID)
	if err != nil {
		// The schema is static; this cannot happen.
		panic(fmt.Sprintf("peers: watch: %v", err))
	}
	return it.WatchCh()
}

// WaitVerdicts blocks until no peer is Unknown or ctx ends.
func (r *Registry) WaitVerdicts(ctx context.Context) error {
	for {
		ch := r.Watch()
		pending := false
		for _, p := range r.Peers() {
			if l := p.health.row.Load(); l.state == Unknown && l.admin != Maintenance {
				pending = true
				break
			}
		}
		if !pending {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Observe hears one outcome of p's — a connect or a probe, an answer, a
// late head, an HTTP probe, another's word — and puts the verdict its
// health part makes of it in force. A failed connect counts towards the
// peer's death; only a successful probe revives a dead or unknown peer.
// A fleet member's hop is judged by the fleet, not here (member.go).
//
// A successful connect, and a complete answer, on a healthy alive peer is
// lock-free and allocation-free.
func (r *Registry) Observe(p *Peer, o Outcome) {
	if p.settings().member {
		return
	}
	h := &p.health
	o2 := r.opts.Load()
	var v verdict
	switch o.Event {
	case Connected:
		v = h.observeConnect(o, o2.Health)
	case ConnectSlow:
		v = h.observeSlow()
	case Answered:
		v = h.observeAnswer(o, o2.Health, o2.ReadTimeout)
	case HeadLate:
		v = h.observeLate(o.FirstByte)
	case HTTPProbed:
		v = h.observeHTTPProbe(o, o2.Health, o2.ReadTimeout)
	case Reported:
		v = h.observeReport(o)
	case NextHopFailed:
		v = h.observeNextHop(o)
	case Hedged:
		h.hedged.Add(1)
	case DestProbed:
		v = h.observeDestProbe(o)
	case ICPReplied:
		v = h.observeICP(o)
	}
	if v.change != keep {
		if o.At.IsZero() {
			o.At = r.now()
		}
		r.apply(p, v, o.At)
	}
}

// apply puts a verdict of p's health in force at at: a change of its row
// (row.go), with the registry's own rules over every parent — no more
// than max_answer_dead of them dead by answers — and its log line.
func (r *Registry) apply(p *Peer, v verdict, at time.Time) {
	switch v.change {
	case suspect:
		switch {
		case v.by != "":
			if r.setSuspect(p, true, v.byAnswers, v.by, suspected(r.now(), v.cause, v.detail)) {
				how := "; probing it"
				if v.byAnswers {
					how = "; probing it over HTTP"
				}
				r.log.WithFields(logrus.Fields{"peer": p.Name(), "cause": v.cause, "detail": v.detail}).
					Warnf("%s %s is suspect: %s%s", p.Type().Label(), p.Name(), v.detail, how)
			}
		case v.byAnswers:
			if r.setSuspect(p, true, true, "", suspected(r.now(), v.cause, v.detail)) {
				r.logSuspicion(p, at, true, v.cause, v.detail)
			}
		case r.setSuspect(p, true, false, "", suspected(at, v.cause, v.detail)):
			r.logSuspicion(p, at, true, v.cause, v.detail)
		}
	case settle:
		if r.setSuspect(p, false, false, "", settled(at, v.cause, v.detail)) {
			r.logSuspicion(p, at, false, v.cause, v.detail)
		}
	case die:
		if v.answers && !r.mayTakeOut(p, r.opts.Load().Health, false) {
			// One more dead by answers would leave more than
			// max_answer_dead of the parents out: alive, suspect.
			r.capAnswerDeath(p, v, at)
			return
		}
		r.transition(p, v, at)
	case revive:
		r.transition(p, v, at)
	case hold:
		r.holdProbe(p, v.good, v.note)
	case unOutlier:
		r.clearOutlier(p, at, v.detail)
	case cutOff, reconnect:
		r.cutOff(p, v, at)
	case destLost, destBack:
		r.logDest(p, v, at)
	}
}

// capAnswerDeath keeps a parent alive (suspect) that its answers would
// kill, when that would leave more than max_answer_dead of the parents
// dead by answers; logged once a death.
func (r *Registry) capAnswerDeath(p *Peer, v verdict, at time.Time) {
	h := r.opts.Load().Health
	detail := fmt.Sprintf("answer failed (%s, %d in a row), but dead by answers would leave more than max_answer_dead out", v.class, v.n)
	if r.setSuspect(p, true, true, "", suspected(r.now(), CauseAnswerFailures, detail)) {
		r.logSuspicion(p, at, true, CauseAnswerFailures, detail)
	}
	a := &p.health.answers
	a.mu.Lock()
	logged := a.capLogged
	a.capLogged = true
	a.mu.Unlock()
	if !logged {
		r.log.WithFields(logrus.Fields{"peer": p.Name(), "answer_failures": v.n}).
			Warnf("%s %s stays alive (suspect): max_answer_dead (%g%%) of the parents are dead by answers", p.Type().Label(), p.Name(), float64(h.MaxAnswerDead)*100)
	}
}

// mayTakeOut reports whether one more parent out stays within
// max_answer_dead: dead by answers, or (with outliers) an outlier.
func (r *Registry) mayTakeOut(p *Peer, h Config, outliers bool) bool {
	parents, out := 0, 1
	for _, q := range r.Peers() {
		if q.Type() != Parent {
			continue
		}
		parents++
		if l := q.health.row.Load(); q != p && (l.state == Dead && l.answerDead || outliers && l.outlier) {
			out++
		}
	}
	return parents > 0 && float64(out) <= float64(h.MaxAnswerDead)*float64(parents)+1e-9
}

// BeginRequest accounts a request about to be sent to p. It returns false,
// accounting nothing, when p is at max_conn: such a peer is skipped, not
// failed. now is the request's start (the caller has read the clock
// already): the peer's last use, for idle_probe.
func (r *Registry) BeginRequest(p *Peer, now time.Time) bool {
	h := &p.health
	max := int64(p.settings().spec.MaxConn)
	for {
		n := h.inFlight.Load()
		if max > 0 && n >= max {
			return false
		}
		if h.inFlight.CompareAndSwap(n, n+1) {
			break
		}
	}
	h.requests.Add(1)
	h.series.request(now)
	// lastUsed only feeds idle_probe; millisecond precision is plenty and
	// skipping most stores keeps this per-request path uncontended.
	if now := now.UnixNano(); now-h.lastUsed.Load() > int64(time.Millisecond) {
		storeLater(&h.lastUsed, now)
	}
	return true
}

// EndRequest undoes BeginRequest once the exchange is over.
func (r *Registry) EndRequest(p *Peer) { p.health.inFlight.Add(-1) }

// SetNextProbe records when the prober will next probe p (zero: none).
func (r *Registry) SetNextProbe(p *Peer, at time.Time) {
	if at.IsZero() {
		p.health.nextProbe.Store(0)
		return
	}
	p.health.nextProbe.Store(at.UnixNano())
}
