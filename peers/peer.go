package peers

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
}

// Peer is the live handle of one configured peer. It is shared by every
// package and survives reloads as long as the peer keeps its name and
// address. Its questions (State, Eligible, ...) are lock-free and
// allocation-free; it changes only through the Registry.
type Peer struct {
	cfg atomic.Pointer[settings]

	state atomic.Int32 // State
	admin atomic.Int32 // AdminState

	consecutive     atomic.Int64
	connects        atomic.Int64
	connectFailures atomic.Int64
	requests        atomic.Int64
	inFlight        atomic.Int64
	probes          atomic.Int64
	probeFailures   atomic.Int64
	deaths          atomic.Int64
	revivals        atomic.Int64

	// Times in Unix nanoseconds; 0 means never.
	lastFailure atomic.Int64
	lastSuccess atomic.Int64
	lastUsed    atomic.Int64
	deadSince   atomic.Int64
	nextProbe   atomic.Int64

	lastError atomic.Pointer[string]

	// slow is set when a connect stayed pending past its hedge delay; the
	// next successful connect clears it.
	slow atomic.Bool

	// Smoothed connect time and its mean deviation, float64 bits of
	// milliseconds (RFC 6298 style). Updates may race; they are statistics.
	srtt      atomic.Uint64
	rttvar    atomic.Uint64
	lastProbe atomic.Uint64 // RTT of the last successful probe, ms
}

func newPeer(s *settings) *Peer {
	p := &Peer{}
	p.cfg.Store(s)
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

// Type is parent or sibling.
func (p *Peer) Type() Type { return p.settings().typ }

// Weight is the configured weight (at least 1).
func (p *Peer) Weight() int { return p.settings().spec.Weight }

// IsDefault reports whether this is a last-resort parent.
func (p *Peer) IsDefault() bool { return p.settings().spec.Default }

// Login is the "user:pass" for Proxy-Authorization, or "".
func (p *Peer) Login() string { return p.settings().spec.Login }

// MaxConn is the in-flight cap, 0 for none.
func (p *Peer) MaxConn() int { return p.settings().spec.MaxConn }

// ConnectTimeout is the peer's effective connect timeout.
func (p *Peer) ConnectTimeout() time.Duration { return p.settings().connectTimeout }

// ProbeTimeout is the peer's effective probe timeout.
func (p *Peer) ProbeTimeout() time.Duration { return p.settings().probeTimeout }

// ConnectFailLimit is the peer's effective fail limit.
func (p *Peer) ConnectFailLimit() int { return int(p.settings().failLimit) }

// State is the peer's current liveness.
func (p *Peer) State() State { return State(p.state.Load()) }

// AdminState is the operator-set state.
func (p *Peer) AdminState() AdminState { return AdminState(p.admin.Load()) }

// Full reports whether the peer is at its max_conn.
func (p *Peer) Full() bool {
	max := p.settings().spec.MaxConn
	return max > 0 && p.inFlight.Load() >= int64(max)
}

// Eligible reports whether a new request may be sent to the peer now: alive,
// enabled and not at max_conn. A dead or unknown peer is never eligible,
// however long it has been idle.
func (p *Peer) Eligible() bool {
	return p.State() == Alive && p.AdminState() == Enabled && !p.Full()
}

// Suspect reports whether an alive peer has failed connects below its
// limit, or a connect pending past its hedge delay: still eligible, but
// planners put healthy peers first.
func (p *Peer) Suspect() bool {
	return p.State() == Alive && (p.consecutive.Load() > 0 || p.slow.Load())
}

// ConsecutiveFailures is the current run of connect failures.
func (p *Peer) ConsecutiveFailures() int64 { return p.consecutive.Load() }

// InFlight is the number of requests being forwarded to the peer.
func (p *Peer) InFlight() int64 { return p.inFlight.Load() }

// LastUsed is when the peer last got a request (zero if never).
func (p *Peer) LastUsed() time.Time { return unixTime(p.lastUsed.Load()) }

// LastFailure is the time of the last failed connect.
func (p *Peer) LastFailure() time.Time { return unixTime(p.lastFailure.Load()) }

// LastSuccess is the time of the last successful connect.
func (p *Peer) LastSuccess() time.Time { return unixTime(p.lastSuccess.Load()) }

// DeadSince is when the peer last died (zero if alive or never died).
func (p *Peer) DeadSince() time.Time { return unixTime(p.deadSince.Load()) }

// ConnectTime is the smoothed connect time (0 before the first connect).
func (p *Peer) ConnectTime() time.Duration {
	return time.Duration(loadFloat(&p.srtt) * float64(time.Millisecond))
}

// ConnectTimeVar is the smoothed mean deviation of the connect time.
func (p *Peer) ConnectTimeVar() time.Duration {
	return time.Duration(loadFloat(&p.rttvar) * float64(time.Millisecond))
}

// Counters is a point-in-time copy of a peer's counters.
type Counters struct {
	ConnectsTotal        int64
	ConnectFailuresTotal int64
	RequestsTotal        int64
	InFlight             int64
	ProbesTotal          int64
	ProbeFailuresTotal   int64
	DeathsTotal          int64
	RevivalsTotal        int64
}

// Counters reads every counter (each atomically, not as one snapshot).
func (p *Peer) Counters() Counters {
	return Counters{
		ConnectsTotal:        p.connects.Load(),
		ConnectFailuresTotal: p.connectFailures.Load(),
		RequestsTotal:        p.requests.Load(),
		InFlight:             p.inFlight.Load(),
		ProbesTotal:          p.probes.Load(),
		ProbeFailuresTotal:   p.probeFailures.Load(),
		DeathsTotal:          p.deaths.Load(),
		RevivalsTotal:        p.revivals.Load(),
	}
}

// Status is the PEER object of the admin API (contract section 9).
type Status struct {
	Name                 string     `json:"name"`
	Host                 string     `json:"host"`
	Port                 int        `json:"port"`
	Type                 string     `json:"type"`
	State                string     `json:"state"`
	AdminState           string     `json:"admin_state"`
	Weight               int        `json:"weight"`
	Default              bool       `json:"default"`
	MaxConn              int        `json:"max_conn"`
	ConnectFailLimit     int        `json:"connect_fail_limit"`
	ConsecutiveFailures  int64      `json:"consecutive_failures"`
	ConnectFailuresTotal int64      `json:"connect_failures_total"`
	ConnectsTotal        int64      `json:"connects_total"`
	RequestsTotal        int64      `json:"requests_total"`
	InFlight             int64      `json:"in_flight"`
	ProbesTotal          int64      `json:"probes_total"`
	ProbeFailuresTotal   int64      `json:"probe_failures_total"`
	DeathsTotal          int64      `json:"deaths_total"`
	RevivalsTotal        int64      `json:"revivals_total"`
	LastFailure          *time.Time `json:"last_failure"`
	LastSuccess          *time.Time `json:"last_success"`
	DeadSince            *time.Time `json:"dead_since"`
	NextProbe            *time.Time `json:"next_probe"`
	LastError            *string    `json:"last_error"`
	Suspect              bool       `json:"suspect"`
	ConnectTimeMs        float64    `json:"connect_time_ms"`
	ConnectTimeVarMs     float64    `json:"connect_time_var_ms"`
	LastProbeRTTMs       float64    `json:"last_probe_rtt_ms"`
}

// Status returns the peer as the admin API shows it. It never includes the
// login secret.
func (p *Peer) Status() Status {
	s := p.settings()
	c := p.Counters()
	return Status{
		Name:                 s.spec.Name,
		Host:                 s.spec.Host,
		Port:                 s.spec.Port,
		Type:                 s.typ.String(),
		State:                p.State().String(),
		AdminState:           p.AdminState().String(),
		Weight:               s.spec.Weight,
		Default:              s.spec.Default,
		MaxConn:              s.spec.MaxConn,
		ConnectFailLimit:     int(s.failLimit),
		ConsecutiveFailures:  p.consecutive.Load(),
		ConnectFailuresTotal: c.ConnectFailuresTotal,
		ConnectsTotal:        c.ConnectsTotal,
		RequestsTotal:        c.RequestsTotal,
		InFlight:             c.InFlight,
		ProbesTotal:          c.ProbesTotal,
		ProbeFailuresTotal:   c.ProbeFailuresTotal,
		DeathsTotal:          c.DeathsTotal,
		RevivalsTotal:        c.RevivalsTotal,
		LastFailure:          timePtr(p.lastFailure.Load()),
		LastSuccess:          timePtr(p.lastSuccess.Load()),
		DeadSince:            timePtr(p.deadSince.Load()),
		NextProbe:            timePtr(p.nextProbe.Load()),
		LastError:            p.lastError.Load(),
		Suspect:              p.Suspect(),
		ConnectTimeMs:        round3(loadFloat(&p.srtt)),
		ConnectTimeVarMs:     round3(loadFloat(&p.rttvar)),
		LastProbeRTTMs:       round3(loadFloat(&p.lastProbe)),
	}
}

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

func timePtr(ns int64) *time.Time {
	if ns == 0 {
		return nil
	}
	t := time.Unix(0, ns).UTC()
	return &t
}

func loadFloat(a *atomic.Uint64) float64 { return math.Float64frombits(a.Load()) }

func storeFloat(a *atomic.Uint64, f float64) { a.Store(math.Float64bits(f)) }

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }
