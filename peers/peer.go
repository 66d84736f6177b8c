package peers

// This file holds a peer: its type and states, settings, liveness and
// counters (read lock-free), its snapshot, and its ICP counters.

import (
	"fmt"
	"math"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Type says how a peer is used: parents fetch misses for us, siblings are only
// asked for what they already hold.
type Type uint8

const (
	Parent Type = iota
	Sibling
)

// ParseType maps the config word to a Type.
func ParseType(s string) (Type, error) {
	switch s {
	case "parent":
		return Parent, nil
	case "sibling":
		return Sibling, nil
	}
	return 0, fmt.Errorf("unknown peer type %q (want parent or sibling)", s)
}

func (t Type) String() string {
	if t == Sibling {
		return "sibling"
	}
	return "parent"
}

// UnmarshalText decodes the config word.
func (t *Type) UnmarshalText(b []byte) error {
	v, err := ParseType(string(b))
	if err == nil {
		*t = v
	}
	return err
}

// MarshalText encodes the config word.
func (t Type) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// Label is the word Squid uses in its state-change messages.
func (t Type) Label() string {
	if t == Sibling {
		return "Sibling"
	}
	return "Parent"
}

// State is a peer's liveness as decided by connect outcomes.
type State int32

const (
	// Unknown: not yet probed (new, or its address changed). No traffic.
	Unknown State = iota
	// Alive: the last verdict was a successful connect.
	Alive
	// Dead: connect_fail_limit consecutive connects failed; only a probe
	// revives it.
	Dead
)

func (s State) String() string {
	switch s {
	case Alive:
		return "alive"
	case Dead:
		return "dead"
	}
	return "unknown"
}

// ParseState maps the API word to a State.
func ParseState(s string) (State, error) {
	switch s {
	case "unknown":
		return Unknown, nil
	case "alive":
		return Alive, nil
	case "dead":
		return Dead, nil
	}
	return 0, fmt.Errorf("unknown state %q (want unknown, alive or dead)", s)
}

// AdminState is set by operators and is independent of liveness.
type AdminState int32

const (
	// Enabled peers get traffic while alive.
	Enabled AdminState = iota
	// Drain: no new requests; in-flight ones finish; still probed.
	Drain
	// Maintenance: no requests and no probes.
	Maintenance
)

func (a AdminState) String() string {
	switch a {
	case Drain:
		return "drain"
	case Maintenance:
		return "maintenance"
	}
	return "enabled"
}

// ParseAdminState maps the API word to an AdminState.
func ParseAdminState(s string) (AdminState, error) {
	switch s {
	case "enabled":
		return Enabled, nil
	case "drain":
		return Drain, nil
	case "maintenance":
		return Maintenance, nil
	}
	return 0, fmt.Errorf("unknown admin_state %q (want enabled, drain or maintenance)", s)
}

// settings are a peer's effective configuration: its Spec with the inherited
// values resolved. Replaced as a whole on reload.
type settings struct {
	spec           Spec
	typ            Type
	failLimit      int64
	connectTimeout time.Duration
	probeTimeout   time.Duration
	slowStart      time.Duration
	member         bool // a fleet member (member.go), not a configured peer
}

// liveness is a peer's state as the registry decides it: its liveness,
// admin state, whether it is suspect, and its transitions. It is never
// modified: a change makes a new one, which is written to the peer's memdb
// row (the truth, with its indexes and watches) and, in the same write
// transaction, published to the peer's handle for lock-free reads. So a
// reader sees one committed liveness or the next, never a mix.
type liveness struct {
	state   State
	admin   AdminState
	suspect bool // alive, with failed connects below the limit or a connect pending past its hedge delay
	// suspectBy is the cause of a suspicion from outside the peer's own
	// connects (CauseFleet); "" otherwise.
	suspectBy string
	since     int64 // dead since, Unix nanoseconds; 0 when not dead
	deaths    int64
	revived   int64
	// The operator's reason for the admin state, and when it ends by
	// itself (Unix nanoseconds; 0: never).
	reason string
	until  int64
	// Flap damping: the peer died flap_limit times within flap_window;
	// it is revived after flap_limit consecutive good probes (good so
	// far).
	flapping bool
	good     int
	// answerDead: dead by answer failures (revived only by an HTTP
	// probe), with deadFBT the first_byte_timeout in force then (ns).
	answerDead bool
	deadFBT    int64
	// httpSettle: a suspicion (from the fleet's word of an answer death,
	// or an outlier) that only an HTTP probe settles.
	httpSettle bool
	// outlier: suspect for being far slower than its peers (relative.go).
	outlier bool
}

// Peer is the live handle of one configured peer. It is shared by every
// package and survives reloads as long as the peer keeps its name and
// address. Its questions (State, Eligible, ...) are lock-free and
// allocation-free; it changes only through the Registry.
//
// It is two parts: the registry's row (its settings, its liveness and
// admin state, what operators read of its history) and its Traffic,
// what every request and connect to it counts (traffic.go).
type Peer struct {
	// Read by every request and written seldom, these sit on a cache line
	// of their own, away from the counters every request writes: sharing
	// one, each request's write on one core made the next read of the
	// peer's settings on the other miss.
	_       cacheLinePad
	cfg     atomic.Pointer[settings]
	live    atomic.Pointer[liveness] // the committed row's; see liveness
	timings timingsSlot              // the metrics' histograms (timings.go)
	_       cacheLinePad

	// Traffic is what requests, connects and probes to the peer count.
	Traffic

	nextProbe atomic.Int64 // Unix nanoseconds; 0: none scheduled
	rampUntil atomic.Int64 // slow start ends (Unix ns); 0: not ramping

	// opsMu guards what operators read: history, upstream errors, deaths,
	// and the spacing of suspicion log lines.
	opsMu      sync.Mutex
	history    []Transition
	upstream   map[string]int64
	deathTimes []int64
	suspectLog time.Time // the last suspicion line logged
	suspectMut int       // suspicion changes not logged since
}

// cacheLinePad keeps what is on either side of it off one cache line.
type cacheLinePad struct{ _ [64]byte }

func newPeer(s *settings) *Peer {
	p := &Peer{}
	p.cfg.Store(s)
	p.live.Store(&liveness{})
	return p
}

func (p *Peer) settings() *settings { return p.cfg.Load() }

// Name is the peer's unique name.
func (p *Peer) Name() string { return p.settings().spec.Name }

// Host is the configured host name or address.
func (p *Peer) Host() string { return p.settings().spec.Host }

// Port is the peer's proxy port.
func (p *Peer) Port() int { return p.settings().spec.Port }

// Addr is host:port for dialling.
func (p *Peer) Addr() string { return p.settings().spec.Addr() }

// Reached is the IP address the last successful connect to the peer
// reached (its host resolved); zero before any. ICP sends its queries
// there instead of resolving the host itself.
func (t *Traffic) Reached() netip.Addr {
	if a := t.reached.Load(); a != nil {
		return *a
	}
	return netip.Addr{}
}

// Type is parent or sibling.
func (p *Peer) Type() Type { return p.settings().typ }

// Weight is the configured weight (at least 1).
func (p *Peer) Weight() int { return p.settings().spec.Weight }

// IsDefault reports whether this is a last-resort parent.
func (p *Peer) IsDefault() bool { return p.settings().spec.Default }

// ICPPort is the peer's ICP port; 0: not queried.
func (p *Peer) ICPPort() int { return p.settings().spec.ICPPort }

// Login is the "user:pass" for Proxy-Authorization, or "".
func (p *Peer) Login() string { return p.settings().spec.Login }

// ProxyOnly reports whether answers from this peer are never stored.
func (p *Peer) ProxyOnly() bool { return p.settings().spec.ProxyOnly }

// Tier is the peer's tier (lower first).
func (p *Peer) Tier() int { return p.settings().spec.Tier }

// TLS reports whether peerd speaks TLS to the peer.
func (p *Peer) TLS() bool { return p.settings().spec.TLS }

// MaxConn is the in-flight cap, 0 for none.
func (p *Peer) MaxConn() int { return p.settings().spec.MaxConn }

// ConnectTimeout is the peer's effective connect timeout.
func (p *Peer) ConnectTimeout() time.Duration { return p.settings().connectTimeout }

// ProbeTimeout is the peer's effective probe timeout.
func (p *Peer) ProbeTimeout() time.Duration { return p.settings().probeTimeout }

// ConnectFailLimit is the peer's effective fail limit.
func (p *Peer) ConnectFailLimit() int { return int(p.settings().failLimit) }

// State is the peer's current liveness.
func (p *Peer) State() State { return p.live.Load().state }

// AdminState is the operator-set state.
func (p *Peer) AdminState() AdminState { return p.live.Load().admin }

// Full reports whether the peer is at its max_conn.
func (p *Peer) Full() bool {
	max := p.settings().spec.MaxConn
	return max > 0 && p.inFlight.Load() >= int64(max)
}

// Eligible reports whether a new request may be sent to the peer now: alive,
// enabled and not at max_conn. A dead or unknown peer is never eligible,
// however long it has been idle.
func (p *Peer) Eligible() bool {
	l := p.live.Load()
	return l.state == Alive && l.admin == Enabled && !p.Full()
}

// Suspect reports whether an alive peer has failed connects below its
// limit, or a connect pending past its hedge delay: still eligible, but
// planners put healthy peers first.
func (p *Peer) Suspect() bool {
	l := p.live.Load()
	return l.state == Alive && l.suspect
}

// Deaths counts the peer's deaths: a new death is a new count, whatever
// the clock says.
func (p *Peer) Deaths() int64 { return p.live.Load().deaths }

// ConsecutiveFailures is the current run of connect failures.
func (t *Traffic) ConsecutiveFailures() int64 { return t.consecutive.Load() }

// InFlight is the number of requests being forwarded to the peer.
func (t *Traffic) InFlight() int64 { return t.inFlight.Load() }

// LastUsed is when the peer last got a request (zero if never).
func (t *Traffic) LastUsed() time.Time { return unixTime(t.lastUsed.Load()) }

// LastFailure is the time of the last failed connect.
func (t *Traffic) LastFailure() time.Time { return unixTime(t.lastFailure.Load()) }

// LastSuccess is the time of the last successful connect.
func (t *Traffic) LastSuccess() time.Time { return unixTime(t.lastSuccess.Load()) }

// DeadSince is when the peer last died (zero if alive or never died).
func (p *Peer) DeadSince() time.Time { return unixTime(p.live.Load().since) }

// ConnectTime is the smoothed connect time (0 before the first connect).
func (t *Traffic) ConnectTime() time.Duration {
	return time.Duration(loadFloat(&t.srtt) * float64(time.Millisecond))
}

// ConnectTimeVar is the smoothed mean deviation of the connect time.
func (t *Traffic) ConnectTimeVar() time.Duration {
	return time.Duration(loadFloat(&t.rttvar) * float64(time.Millisecond))
}

// Snapshot is one read of a peer: its committed liveness (taken whole)
// and its counters (each read atomically).
type Snapshot struct {
	Peer                *Peer
	State               State
	Admin               AdminState
	Suspect             bool
	DeadSince           time.Time
	DeathsTotal         int64
	RevivalsTotal       int64
	ConsecutiveFailures int64

	ConnectsTotal        int64
	ConnectFailuresTotal int64
	RequestsTotal        int64
	InFlight             int64
	ProbesTotal          int64
	ProbeFailuresTotal   int64

	LastFailure, LastSuccess, NextProbe time.Time
	// LastError is the last connect error ("" for none).
	LastError                                 string
	Flapping                                  bool
	AdminReason                               string
	AdminUntil                                time.Time
	ConnectTime, ConnectTimeVar, LastProbeRTT time.Duration
	ICP                                       ICPSnapshot
}

// Snapshot reads the peer.
func (p *Peer) Snapshot() Snapshot { return p.snapshot(p.live.Load()) }

func (p *Peer) snapshot(l *liveness) Snapshot {
	s := Snapshot{
		Peer: p, State: l.state, Admin: l.admin, Suspect: l.state == Alive && l.suspect,
		DeadSince: unixTime(l.since), DeathsTotal: l.deaths, RevivalsTotal: l.revived,
		ConsecutiveFailures:  p.consecutive.Load(),
		ConnectsTotal:        p.connects.Load(),
		ConnectFailuresTotal: p.connectFailures.Load(),
		RequestsTotal:        p.requests.Load(),
		InFlight:             p.inFlight.Load(),
		ProbesTotal:          p.probes.Load(),
		ProbeFailuresTotal:   p.probeFailures.Load(),
		LastFailure:          unixTime(p.lastFailure.Load()),
		LastSuccess:          unixTime(p.lastSuccess.Load()),
		NextProbe:            unixTime(p.nextProbe.Load()),
		ConnectTime:          msDuration(loadFloat(&p.srtt)),
		ConnectTimeVar:       msDuration(loadFloat(&p.rttvar)),
		LastProbeRTT:         msDuration(loadFloat(&p.lastProbe)),
		Flapping:             l.flapping,
		AdminReason:          l.reason,
		AdminUntil:           unixTime(l.until),
		ICP:                  p.icp.snapshot(),
	}
	if e := p.lastError.Load(); e != nil {
		s.LastError = *e
	}
	return s
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

func loadFloat(a *atomic.Uint64) float64 { return math.Float64frombits(a.Load()) }

func storeFloat(a *atomic.Uint64, f float64) { a.Store(math.Float64bits(f)) }
