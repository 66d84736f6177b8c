package peers

// This file holds a peer: its type and states, and its identity and
// settings beside its health part (health.go).

import (
	"fmt"
	"math"
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

// Peer is the live handle of one configured peer: its identity and
// settings, and its Health, a part of its own. It is shared by every
// package and survives reloads as long as the peer keeps its name and
// address. Its questions are lock-free and allocation-free; what it
// learns and what it is judged to be change only through the Registry.
type Peer struct {
	// Read by every request and written seldom, the settings and the
	// head of the health part (its committed row) sit on a cache line of
	// their own, away from the counters every request writes: sharing
	// one, each request's write on one core made the next read of the
	// peer's settings on the other miss.
	_   cacheLinePad
	cfg atomic.Pointer[settings]
	// health is the peer's health: its liveness (its registry row) and
	// everything that judges it (health.go).
	health Health
}

// cacheLinePad keeps what is on either side of it off one cache line.
type cacheLinePad struct{ _ [64]byte }

func newPeer(s *settings) *Peer {
	p := &Peer{}
	p.cfg.Store(s)
	p.health.peer = p
	p.health.row.Store(&row{})
	return p
}

func (p *Peer) settings() *settings { return p.cfg.Load() }

// Health is the peer's health part: its liveness, as the registry last
// committed it, and what its traffic, probes and answers showed.
func (p *Peer) Health() *Health { return &p.health }

// Name is the peer's unique name.
func (p *Peer) Name() string { return p.settings().spec.Name }

// Host is the configured host name or address.
func (p *Peer) Host() string { return p.settings().spec.Host }

// Port is the peer's proxy port.
func (p *Peer) Port() int { return p.settings().spec.Port }

// Addr is host:port for dialling.
func (p *Peer) Addr() string { return p.settings().spec.Addr() }

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

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

func loadFloat(a *atomic.Uint64) float64 { return math.Float64frombits(a.Load()) }

func storeFloat(a *atomic.Uint64, f float64) { a.Store(math.Float64bits(f)) }
