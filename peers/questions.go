package peers

// This file holds what every package asks of a peer's health, lock-free:
// its liveness and admin state as last committed, whether a request may
// be sent to it now, and its snapshot for operators.

import (
	"net/netip"
	"time"
)

// State is the peer's current liveness.
func (h *Health) State() State { return h.row.Load().state }

// AdminState is the operator-set state.
func (h *Health) AdminState() AdminState { return h.row.Load().admin }

// Full reports whether the peer is at its max_conn.
func (h *Health) Full() bool {
	max := h.peer.settings().spec.MaxConn
	return max > 0 && h.inFlight.Load() >= int64(max)
}

// Eligible reports whether a new request may be sent to the peer now: alive,
// enabled, with a usable next hop of its own as far as it said (beyond.go)
// and not at max_conn. A dead or unknown peer is never eligible, however
// long it has been idle.
func (h *Health) Eligible() bool {
	l := h.row.Load()
	return l.state == Alive && l.admin == Enabled && !l.noNextHop && !h.Full()
}

// Suspect reports whether an alive peer has failed connects below its
// limit, or a connect pending past its hedge delay: still eligible, but
// planners put healthy peers first.
func (h *Health) Suspect() bool {
	l := h.row.Load()
	return l.state == Alive && l.suspect
}

// Outlier reports whether the peer is suspect for being an outlier.
func (h *Health) Outlier() bool { return h.row.Load().outlier }

// Deaths counts the peer's deaths: a new death is a new count, whatever
// the clock says.
func (h *Health) Deaths() int64 { return h.row.Load().deaths }

// DeadSince is when the peer last died (zero if alive or never died).
func (h *Health) DeadSince() time.Time { return unixTime(h.row.Load().since) }

// HeldProbes is how many consecutive good probes a flapping peer has had.
func (h *Health) HeldProbes() int { return h.row.Load().good }

// DeadCause is "connect" or "answer" for a dead peer, "" otherwise.
func (h *Health) DeadCause() string { return h.row.Load().deadCause() }

// ProbeKind is the kind of the peer's next probe: "http" for a parent
// dead by answers (or suspected of it), "tcp" otherwise.
func (h *Health) ProbeKind() string { return h.row.Load().probeKind() }

func (l *liveness) deadCause() string {
	switch {
	case l.state != Dead:
		return ""
	case l.answerDead:
		return DeadByAnswer
	}
	return DeadByConnect
}

func (l *liveness) probeKind() string {
	if l.state == Dead && l.answerDead || l.state == Alive && (l.httpSettle || l.noNextHop && l.noNextHopBy == CauseNextHop) {
		return "http"
	}
	return "tcp"
}

// Hung reports whether the peer's latest connect hung (it timed out, or
// was pending past its hedge delay) and no connect has succeeded since.
func (h *Health) Hung() bool { return h.hung.Load() }

// AnswerFailures is the consecutive answer failures.
func (h *Health) AnswerFailures() int64 { return h.answerConsec.Load() }

// LastUsed is when the peer last got a request (zero if never).
func (h *Health) LastUsed() time.Time { return unixTime(h.lastUsed.Load()) }

// LastSuccess is the time of the last successful connect.
func (h *Health) LastSuccess() time.Time { return unixTime(h.lastSuccess.Load()) }

// ConnectTime is the smoothed connect time (0 before the first connect).
func (h *Health) ConnectTime() time.Duration { return msDuration(loadFloat(&h.srtt)) }

// Reached is the IP address the last successful connect to the peer
// reached (its host resolved); zero before any. ICP sends its queries
// there instead of resolving the host itself.
func (h *Health) Reached() netip.Addr {
	if a := h.reached.Load(); a != nil {
		return *a
	}
	return netip.Addr{}
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

	// What judged it: connect failures by class, the errors it reported
	// of its own next hop, its answers, and how it compares with its
	// peers (latency share, outlier, recent median head time, ms).
	FailuresByClass       map[string]int64
	UpstreamErrors        map[string]int64
	AnswerFailures        int64
	AnswerFailuresByClass map[string]int64
	FirstByteMs           float64
	Hedged                int64
	LatencyShare          float64
	Outlier               bool
	RecentHeadMs          float64
	// Probe is its next probe's kind; DeadCause "connect" or "answer"
	// when dead.
	Probe, DeadCause         string
	BytesSent, BytesReceived int64
	// NoNextHop: cut off, it said it has no usable next hop (by whom:
	// NoNextHopBy). Unreachable are the destinations it said it cannot
	// reach (the oldest first), of UnreachableTotal ever marked.
	NoNextHop        bool
	NoNextHopBy      string
	Unreachable      []Dest
	UnreachableTotal int64
}

// Snapshot reads the peer.
func (h *Health) Snapshot() Snapshot { return h.snapshot(h.row.Load()) }

func (h *Health) snapshot(l *row) Snapshot {
	s := Snapshot{
		Peer: h.peer, State: l.state, Admin: l.admin, Suspect: l.state == Alive && l.suspect,
		DeadSince: unixTime(l.since), DeathsTotal: l.deaths, RevivalsTotal: l.revived,
		ConsecutiveFailures:   h.consecutive.Load(),
		ConnectsTotal:         h.connects.Load(),
		ConnectFailuresTotal:  h.connectFailures.Load(),
		RequestsTotal:         h.requests.Load(),
		InFlight:              h.inFlight.Load(),
		ProbesTotal:           h.probes.Load(),
		ProbeFailuresTotal:    h.probeFailures.Load(),
		LastFailure:           unixTime(h.lastFailure.Load()),
		LastSuccess:           unixTime(h.lastSuccess.Load()),
		NextProbe:             unixTime(h.nextProbe.Load()),
		ConnectTime:           msDuration(loadFloat(&h.srtt)),
		ConnectTimeVar:        msDuration(loadFloat(&h.rttvar)),
		LastProbeRTT:          msDuration(loadFloat(&h.lastProbe)),
		Flapping:              l.flapping,
		AdminReason:           l.reason,
		AdminUntil:            unixTime(l.until),
		ICP:                   h.icp.snapshot(),
		FailuresByClass:       make(map[string]int64, failClasses),
		UpstreamErrors:        h.upstreamErrors(),
		AnswerFailures:        h.answerConsec.Load(),
		AnswerFailuresByClass: make(map[string]int64, answerClasses-1),
		FirstByteMs:           h.firstByteMs(),
		Hedged:                h.hedged.Load(),
		LatencyShare:          h.LatencyShare(),
		Outlier:               l.outlier,
		RecentHeadMs:          float64(h.recent.median.Load()) / float64(time.Millisecond),
		BytesSent:             h.bytesSent.Load(),
		BytesReceived:         h.bytesReceived.Load(),
		NoNextHop:             l.noNextHop,
		NoNextHopBy:           l.noNextHopBy,
		Unreachable:           h.reach.unreachable(),
		UnreachableTotal:      h.reach.total.Load(),
	}
	for i, n := range FailureClassNames {
		s.FailuresByClass[n] = h.failures[i].Load()
	}
	for c := AnswerLate; c < answerClasses; c++ {
		s.AnswerFailuresByClass[c.String()] = h.answerByClass[c].Load()
	}
	s.Probe, s.DeadCause = l.probeKind(), l.deadCause()
	if e := h.lastError.Load(); e != nil {
		s.LastError = *e
	}
	return s
}
