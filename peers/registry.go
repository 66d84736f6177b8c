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
	"math"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	memdb "github.com/hashicorp/go-memdb"
	"github.com/sirupsen/logrus"
)

// ErrUnknownPeer is returned for a name no configured peer has.
var ErrUnknownPeer = errors.New("unknown peer")

// Observation is one connect outcome, with time as data.
type Observation struct {
	At    time.Time
	Err   error         // nil: the TCP connect succeeded
	RTT   time.Duration // connect time of a success
	Probe bool          // made by the prober, not for a client
	// Addr is the address a successful connect reached (zero: unknown);
	// the peer keeps the last one, for those who must reach the peer
	// without a connect of their own (ICP).
	Addr netip.Addr
}

// Options configure a Registry.
type Options struct {
	Health Config
	// ConnectTimeout is the default for peers without their own ([proxy]
	// connect_timeout).
	ConnectTimeout time.Duration
	// ReadTimeout is [proxy] read_timeout: the automatic first-byte
	// timeout never exceeds it.
	ReadTimeout time.Duration
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
	// groups are the peer names of each route, whose parents are judged
	// against each other (relative.go).
	groups atomic.Pointer[[][]string]
	// matching: parents compared origin by origin (matched.go).
	matching matching
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
		out[i] = rw.Peer.snapshot(rw.Live)
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
			if p.State() == Unknown && p.AdminState() != Maintenance {
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

// Observe records one connect outcome for p. A failure counts towards the
// peer's death; a success resets the consecutive count. Only a successful
// probe revives a dead or unknown peer.
//
// The success path on an alive peer is lock-free and allocation-free.
func (r *Registry) Observe(p *Peer, o Observation) {
	if p.Member() {
		return // memberlist and the fleet judge members (member.go)
	}
	at := o.At.UnixNano()
	if o.Probe {
		p.probes.Add(1)
	}
	p.connects.Add(1)
	if o.Err == nil {
		r.observeSuccess(p, o, at)
		return
	}
	p.connectFailures.Add(1)
	class := Classify(o.Err)
	p.failures[class].Add(1)
	if class == FailTimeout {
		p.hung.Store(true)
	}
	if o.Probe {
		p.probeFailures.Add(1)
	} else {
		p.series.failure(o.At)
	}
	storeLater(&p.lastFailure, at)
	msg := o.Err.Error()
	p.lastError.Store(&msg)
	n := p.consecutive.Add(1)
	switch p.State() {
	case Alive:
		if limit := p.settings().failLimit; n >= limit {
			r.transition(p, Alive, Dead, o.Err, o.At, CauseConnectFailures)
		} else if !p.Suspect() {
			// healthy -> suspect
			r.suspectOwn(p, CauseConnectFailures, fmt.Sprintf("connect failed (%d of %d before dead): %s", n, limit, msg), o.At)
		}
	case Unknown:
		// The first probe's verdict: no traffic has been sent, and none
		// will be until a probe succeeds.
		if o.Probe {
			r.transition(p, Unknown, Dead, o.Err, o.At, CauseProbe)
		}
	case Dead:
		if o.Probe && p.live.Load().good > 0 {
			r.holdProbe(p, 0, nil) // a failed probe starts the held run over
		}
	}
}

func (r *Registry) observeSuccess(p *Peer, o Observation, at int64) {
	r.observeConnectTime(p, o.RTT)
	if p.hung.Load() {
		p.hung.Store(false)
	}
	if o.Addr.IsValid() {
		if cur := p.reached.Load(); cur == nil || *cur != o.Addr {
			a := o.Addr // a new address: the only allocation, and a rare one
			p.reached.Store(&a)
		}
	}
	if at-p.lastSuccess.Load() > int64(time.Millisecond) {
		storeLater(&p.lastSuccess, at)
	}
	if o.RTT > 0 {
		ms := float64(o.RTT) / float64(time.Millisecond)
		if o.Probe {
			storeFloat(&p.lastProbe, ms)
		}
		srtt := loadFloat(&p.srtt)
		switch {
		case srtt == 0:
			storeFloat(&p.srtt, ms)
			storeFloat(&p.rttvar, ms/2)
		default:
			dev := math.Abs(srtt - ms)
			nsrtt := 0.875*srtt + 0.125*ms
			rv := loadFloat(&p.rttvar)
			nrv := 0.75*rv + 0.25*dev
			// Skip stores that change nothing worth knowing (under 1%):
			// a steady peer's success path then writes no shared line.
			if math.Abs(nsrtt-srtt) > srtt/100 {
				storeFloat(&p.srtt, nsrtt)
			}
			if math.Abs(nrv-rv) > srtt/100 {
				storeFloat(&p.rttvar, nrv)
			}
		}
	}
	l := p.live.Load()
	if l.state == Alive {
		if p.consecutive.Load() != 0 {
			p.consecutive.Store(0)
		}
		if l.suspect && !l.httpSettle { // (a connect never settles an answer suspicion)
			// suspect -> healthy
			cause, how := CauseConnect, "a connect succeeded"
			if o.Probe {
				cause, how = CauseProbe, "own probe connected"
			}
			if r.setSuspectBy(p, false, "", settled(o.At, cause, how)) {
				r.logSuspicion(p, o.At, false, cause, how)
			}
		}
		return
	}
	if !o.Probe || l.answerDead {
		// A traffic connect that succeeds on a dead peer was started
		// before it died; it does not revive it (revival is by probe
		// only). A parent dead by answers accepts connects: only an HTTP
		// probe revives it (ObserveHTTPProbe).
		return
	}
	if l.flapping {
		if need := r.opts.Load().Health.FlapLimit; l.good+1 < need {
			r.holdProbe(p, l.good+1, &Transition{At: o.At, From: l.state.String(), To: l.state.String(), Cause: CauseFlapHold,
				Error: fmt.Sprintf("flapping: good probe %d of %d held", l.good+1, need)})
			return
		}
	}
	r.transition(p, l.state, Alive, nil, o.At, CauseProbe)
}

// holdProbe records a flapping peer's run of good probes.
func (r *Registry) holdProbe(p *Peer, good int, note *Transition) {
	txn := r.writeTxn()
	defer txn.Abort()
	cur := p.live.Load()
	if cur.state != Dead || cur.good == good {
		return
	}
	nl := *cur
	nl.good = good
	r.commitTxn(txn, p, &nl, note)
}

// transition moves p from one state to another. Exactly one caller wins a
// given transition: the check and the change happen inside one memdb write
// transaction, which also serialises transitions with reloads.
func (r *Registry) transition(p *Peer, from, to State, cause error, at time.Time, why string) bool {
	txn := r.writeTxn()
	defer txn.Abort()
	cur := p.live.Load()
	if cur.state != from {
		return false
	}
	consecutive := p.consecutive.Load()
	h := r.opts.Load().Health
	nl := *cur
	nl.state = to
	switch to {
	case Dead:
		nl.deaths++
		nl.since = at.UnixNano()
		nl.suspect, nl.suspectBy, nl.httpSettle = false, "", false
		nl.good = 0
		nl.answerDead, nl.deadFBT = false, 0 // a connect death
		if from == Alive && p.noteDeath(at.UnixNano(), h.FlapWindow, h.FlapLimit) {
			nl.flapping = true
		}
	case Alive:
		p.consecutive.Store(0)
		nl.suspect, nl.suspectBy, nl.httpSettle = false, "", false
		nl.answerDead, nl.deadFBT = false, 0
		nl.since = 0
		nl.flapping, nl.good = false, 0
		if from == Dead {
			nl.revived++
		}
	}
	if !r.commitTxn(txn, p, &nl, &Transition{At: at, From: from.String(), To: to.String(), Cause: why, Error: errString(cause)}) {
		return false
	}
	if to == Alive && from == Dead && p.settings().slowStart > 0 && p.Type() == Parent {
		p.rampUntil.Store(at.UnixNano() + int64(p.settings().slowStart))
	}
	if to == Dead {
		p.rampUntil.Store(0)
	}
	entry := r.log.WithFields(logrus.Fields{"peer": p.Name(), "from": from.String(), "to": to.String()})
	switch {
	case to == Dead:
		entry = entry.WithFields(logrus.Fields{"err": errString(cause), "consecutive_failures": consecutive})
		if nl.flapping && !cur.flapping {
			entry = entry.WithField("flapping", true)
		}
		entry.Warnf("Detected DEAD %s: %s", p.Type().Label(), p.Name())
	case from == Dead:
		entry.Warnf("Detected REVIVED %s: %s", p.Type().Label(), p.Name())
	default:
		entry.Infof("%s %s is alive", p.Type().Label(), p.Name())
	}
	return true
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// commitTxn writes nl as p's liveness: into its row, note (if any) into
// p's history, nl to its handle, then commits. A peer a reload removed
// has no row and is left alone.
func (r *Registry) commitTxn(txn *memdb.Txn, p *Peer, nl *liveness, note *Transition) bool {
	raw, err := txn.First(tablePeers, indexID, p.Name())
	if err != nil || raw == nil || raw.(*row).Peer != p {
		return false
	}
	nr := *raw.(*row)
	nr.State, nr.Live = nl.state.String(), nl
	if err := txn.Insert(tablePeers, &nr); err != nil {
		r.log.WithError(err).WithField("peer", p.Name()).Error("peers: registry update failed")
		return false
	}
	if note != nil {
		// Into the history before anyone can see the change, and under
		// the write lock: a change that follows this one (a probe
		// settling what this made suspect, a revival after this death)
		// cannot be written ahead of it.
		p.record(*note)
	}
	p.live.Store(nl)
	r.commit(txn, false)
	return true
}

// MarkSlow records that a connect to p has been pending longer than its
// hedge delay: p turns suspect (sorted behind healthy peers, and probed)
// until a connect to it succeeds.
func (r *Registry) MarkSlow(p *Peer) {
	if !p.Suspect() && !p.Member() {
		p.hung.Store(true)
		r.suspectOwn(p, CauseSlowConnect, "a connect is pending past its hedge delay", r.now())
	}
}

// BeginRequest accounts a request about to be sent to p. It returns false,
// accounting nothing, when p is at max_conn: such a peer is skipped, not
// failed. now is the request's start (the caller has read the clock
// already): the peer's last use, for idle_probe.
func (r *Registry) BeginRequest(p *Peer, now time.Time) bool {
	max := int64(p.settings().spec.MaxConn)
	for {
		n := p.inFlight.Load()
		if max > 0 && n >= max {
			return false
		}
		if p.inFlight.CompareAndSwap(n, n+1) {
			break
		}
	}
	p.requests.Add(1)
	p.series.request(now)
	// lastUsed only feeds idle_probe; millisecond precision is plenty and
	// skipping most stores keeps this per-request path uncontended.
	if now := now.UnixNano(); now-p.lastUsed.Load() > int64(time.Millisecond) {
		storeLater(&p.lastUsed, now)
	}
	return true
}

// EndRequest undoes BeginRequest once the exchange is over.
func (r *Registry) EndRequest(p *Peer) { p.inFlight.Add(-1) }

// SetNextProbe records when the prober will next probe p (zero: none).
func (r *Registry) SetNextProbe(p *Peer, at time.Time) {
	if at.IsZero() {
		p.nextProbe.Store(0)
		return
	}
	p.nextProbe.Store(at.UnixNano())
}

// storeLater stores v unless a later time is already there, so that
// out-of-order reports never move a timestamp backwards.
func storeLater(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if cur >= v || a.CompareAndSwap(cur, v) {
			return
		}
	}
}
