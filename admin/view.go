package admin

// This file holds the JSON view of a peer that GET /peers and /peers/{name}
// return.

import (
	"math"
	"time"

	"github.com/peerd/peerd/peers"
)

// peerView is the PEER object of the admin API (contract section 9),
// built from a registry snapshot. It never includes the login secret.
type peerView struct {
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
	// What operators ask during an incident (contract section 13).
	FailuresByClass map[string]int64 `json:"failures_by_class"`
	UpstreamErrors  map[string]int64 `json:"upstream_errors"`
	AdminReason     *string          `json:"admin_reason"`
	AdminUntil      *time.Time       `json:"admin_until"`
	Flapping        bool             `json:"flapping"`
	TLS             bool             `json:"tls"`
	Tier            int              `json:"tier"`
	ProxyOnly       bool             `json:"proxy_only"`

	// Gray failures (contract section 16).
	AnswerFailures        int64            `json:"answer_failures"`
	AnswerFailuresByClass map[string]int64 `json:"answer_failures_by_class"`
	FirstByteMs           float64          `json:"first_byte_ms"`
	FirstByteTimeoutMs    float64          `json:"first_byte_timeout_ms"`
	HedgedTotal           int64            `json:"hedged_total"`
	Probe                 string           `json:"probe"`
	DeadCause             *string          `json:"dead_cause"`

	// Parents judged against each other (contract section 21).
	LatencyShare float64 `json:"latency_share"`
	Outlier      bool    `json:"outlier"`
	RecentHeadMs float64 `json:"recent_head_ms"`

	// Beyond the parent's door (contract section 24): cut off, it said
	// it has no usable next hop of its own (no_next_hop_by: next_hop, its
	// answers; icp, ICP_MISS_NOFETCH); the destinations it said it
	// cannot reach, the oldest first, with when and why.
	NoNextHop   bool         `json:"no_next_hop"`
	NoNextHopBy *string      `json:"no_next_hop_by"`
	Unreachable []peers.Dest `json:"unreachable"`

	// ICP (0 / absent counters for a peer without icp_port).
	ICPPort     int     `json:"icp_port"`
	ICPQueries  int64   `json:"icp_queries"`
	ICPHits     int64   `json:"icp_hits"`
	ICPMisses   int64   `json:"icp_misses"`
	ICPDenied   int64   `json:"icp_denied"`
	ICPTimeouts int64   `json:"icp_timeouts"`
	ICPRTTMs    float64 `json:"icp_rtt_ms"`
}

func (a *API) viewOf(s peers.Snapshot) peerView {
	p := s.Peer
	v := peerView{
		Name: p.Name(), Host: p.Host(), Port: p.Port(), Type: p.Type().String(),
		State: s.State.String(), AdminState: s.Admin.String(),
		Weight: p.Weight(), Default: p.IsDefault(), MaxConn: p.MaxConn(), ConnectFailLimit: p.ConnectFailLimit(),
		ConsecutiveFailures:  s.ConsecutiveFailures,
		ConnectFailuresTotal: s.ConnectFailuresTotal,
		ConnectsTotal:        s.ConnectsTotal,
		RequestsTotal:        s.RequestsTotal,
		InFlight:             s.InFlight,
		ProbesTotal:          s.ProbesTotal,
		ProbeFailuresTotal:   s.ProbeFailuresTotal,
		DeathsTotal:          s.DeathsTotal,
		RevivalsTotal:        s.RevivalsTotal,
		LastFailure:          timePtr(s.LastFailure),
		LastSuccess:          timePtr(s.LastSuccess),
		DeadSince:            timePtr(s.DeadSince),
		NextProbe:            timePtr(s.NextProbe),
		Suspect:              s.Suspect,
		ConnectTimeMs:        ms(s.ConnectTime),
		ConnectTimeVarMs:     ms(s.ConnectTimeVar),
		LastProbeRTTMs:       ms(s.LastProbeRTT),
	}
	if s.LastError != "" {
		e := s.LastError
		v.LastError = &e
	}
	v.FailuresByClass = s.FailuresByClass
	v.UpstreamErrors = s.UpstreamErrors
	v.Flapping = s.Flapping
	v.TLS = p.TLS()
	v.Tier = p.Tier()
	v.ProxyOnly = p.ProxyOnly()
	v.ICPPort = p.ICPPort()
	v.ICPQueries, v.ICPHits, v.ICPMisses, v.ICPDenied, v.ICPTimeouts = s.ICP.Queries, s.ICP.Hits, s.ICP.Misses, s.ICP.Denied, s.ICP.Timeouts
	v.ICPRTTMs = ms(s.ICP.MeanRTT)
	v.AnswerFailures = s.AnswerFailures
	v.AnswerFailuresByClass = s.AnswerFailuresByClass
	v.FirstByteMs = math.Round(s.FirstByteMs*1e3) / 1e3
	if a != nil && a.reg != nil {
		fbt, _ := a.reg.FirstByte(p)
		v.FirstByteTimeoutMs = ms(fbt)
	}
	v.HedgedTotal = s.Hedged
	v.LatencyShare = math.Round(s.LatencyShare*1000) / 1000
	v.Outlier = s.Outlier
	v.RecentHeadMs = math.Round(s.RecentHeadMs*1e3) / 1e3
	v.Probe = s.Probe
	if c := s.DeadCause; c != "" {
		v.DeadCause = &c
	}
	v.NoNextHop, v.Unreachable = s.NoNextHop, s.Unreachable
	if s.NoNextHopBy != "" {
		by := s.NoNextHopBy
		v.NoNextHopBy = &by
	}
	v.AdminUntil = timePtr(s.AdminUntil)
	if s.AdminReason != "" {
		r := s.AdminReason
		v.AdminReason = &r
	}
	return v
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }
