package admin

// This file holds the Prometheus collector of the peers' figures, read from
// the registry at scrape time.

import (
	"github.com/peerd/peerd/peers"
	"github.com/prometheus/client_golang/prometheus"
)

// PeerCollector exports per-peer metrics read from the registry at scrape
// time, so nothing is counted twice.
type PeerCollector struct {
	reg *peers.Registry
}

// NewPeerCollector returns a collector over reg.
func NewPeerCollector(reg *peers.Registry) *PeerCollector { return &PeerCollector{reg: reg} }

var (
	// Only the peer name: operators and dashboards match on
	// peerd_peer_up{peer="p1"}; the type is in /peers.
	labels        = []string{"peer"}
	descUp        = prometheus.NewDesc("peerd_peer_up", "1 if the peer is alive, 0 if dead or unknown.", labels, nil)
	descFailures  = prometheus.NewDesc("peerd_peer_connect_failures_total", "Failed TCP connects to the peer (requests, tunnels and probes).", labels, nil)
	descConnects  = prometheus.NewDesc("peerd_peer_connects_total", "TCP connect attempts to the peer.", labels, nil)
	descRequests  = prometheus.NewDesc("peerd_peer_requests_total", "Requests sent to the peer.", labels, nil)
	descChanges   = prometheus.NewDesc("peerd_peer_state_changes_total", "Liveness transitions of the peer, by new state.", append(labels, "to"), nil)
	descProbes    = prometheus.NewDesc("peerd_peer_probes_total", "TCP probes of the peer, by result.", append(labels, "result"), nil)
	descInFlight  = prometheus.NewDesc("peerd_peer_in_flight", "Requests being forwarded to the peer now.", labels, nil)
	descConsec    = prometheus.NewDesc("peerd_peer_consecutive_failures", "Current run of failed connects.", labels, nil)
	descSuspect   = prometheus.NewDesc("peerd_peer_suspect", "1 if the peer is alive but has failed connects below its limit.", labels, nil)
	descConnTime  = prometheus.NewDesc("peerd_peer_connect_time_seconds", "Smoothed TCP connect time.", labels, nil)
	descConnVar   = prometheus.NewDesc("peerd_peer_connect_time_deviation_seconds", "Smoothed mean deviation of the connect time.", labels, nil)
	descProbeRTT  = prometheus.NewDesc("peerd_peer_last_probe_rtt_seconds", "Connect time of the last successful probe.", labels, nil)
	descICP       = prometheus.NewDesc("peerd_peer_icp_total", "ICP queries sent to the peer and its answers, by kind (query, hit, miss, denied, timeout).", append(labels, "kind"), nil)
	descICPRTT    = prometheus.NewDesc("peerd_peer_icp_rtt_seconds", "Mean ICP reply time of the peer.", labels, nil)
	descAnswers   = prometheus.NewDesc("peerd_peer_answer_failures_total", "Answer failures of the parent, by class (late, closed, reset, timeout, own_5xx).", append(labels, "class"), nil)
	descHedged    = prometheus.NewDesc("peerd_peer_hedged_requests_total", "Requests of the parent also sent to the next hop because its response head was late.", labels, nil)
	descFirstByte = prometheus.NewDesc("peerd_peer_first_byte_seconds", "Smoothed response-head time of the parent.", labels, nil)
	descShare     = prometheus.NewDesc("peerd_peer_latency_share", "The factor the parent's share of new requests is scaled by, from its recent response-head times beside its peers' (1 = normal).", labels, nil)
	descAdminDesc = prometheus.NewDesc("peerd_peer_admin_state", "1 for the peer's current admin state.", append(labels, "state"), nil)
	descBytes     = prometheus.NewDesc("peerd_peer_bytes_total", "Bytes of the requests sent to the peer (direction sent) and of its answers relayed to clients (received), tunnels included.", append(labels, "direction"), nil)
	// Beyond the parent's door: counted, never labelled per destination.
	descUnreach      = prometheus.NewDesc("peerd_peer_unreachable_destinations", "Destinations the parent said it cannot reach, avoided through it until a probe through it reaches them.", labels, nil)
	descUnreachTotal = prometheus.NewDesc("peerd_peer_unreachable_total", "Destinations the parent was marked unable to reach.", labels, nil)
	descNoNextHop    = prometheus.NewDesc("peerd_peer_no_next_hop", "1 while the parent is cut off: it said it has no usable next hop of its own.", labels, nil)
)

// Describe sends the descriptors.
func (c *PeerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUp, descFailures, descConnects, descRequests, descChanges, descProbes, descInFlight, descConsec, descSuspect, descConnTime, descConnVar, descProbeRTT, descAdminDesc, descICP, descICPRTT, descAnswers, descHedged, descFirstByte, descShare, descBytes, descUnreach, descUnreachTotal, descNoNextHop} {
		ch <- d
	}
}

// Collect reads every peer's counters.
func (c *PeerCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.reg.Peers() {
		s := p.Health().Snapshot()
		l := []string{p.Name()}
		gauge := func(d *prometheus.Desc, v float64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append(l, extra...)...)
		}
		counter := func(d *prometheus.Desc, v int64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append(l, extra...)...)
		}
		up := 0.0
		if s.State == peers.Alive {
			up = 1
		}
		gauge(descUp, up)
		counter(descFailures, s.ConnectFailuresTotal)
		counter(descConnects, s.ConnectsTotal)
		counter(descRequests, s.RequestsTotal)
		counter(descChanges, s.DeathsTotal, "dead")
		counter(descChanges, s.RevivalsTotal, "alive")
		counter(descProbes, s.ProbesTotal-s.ProbeFailuresTotal, "success")
		counter(descProbes, s.ProbeFailuresTotal, "failure")
		gauge(descInFlight, float64(s.InFlight))
		gauge(descConsec, float64(s.ConsecutiveFailures))
		suspect := 0.0
		if s.Suspect {
			suspect = 1
		}
		gauge(descSuspect, suspect)
		gauge(descConnTime, s.ConnectTime.Seconds())
		gauge(descConnVar, s.ConnectTimeVar.Seconds())
		gauge(descProbeRTT, s.LastProbeRTT.Seconds())
		if p.Type() == peers.Parent {
			for class, n := range s.AnswerFailuresByClass {
				counter(descAnswers, n, class)
			}
			counter(descHedged, s.Hedged)
			gauge(descFirstByte, s.FirstByteMs/1000)
			gauge(descShare, s.LatencyShare)
			gauge(descUnreach, float64(len(s.Unreachable)))
			counter(descUnreachTotal, s.UnreachableTotal)
			cut := 0.0
			if s.NoNextHop {
				cut = 1
			}
			gauge(descNoNextHop, cut)
		}
		if p.ICPPort() != 0 {
			counter(descICP, s.ICP.Queries, "query")
			counter(descICP, s.ICP.Hits, "hit")
			counter(descICP, s.ICP.Misses, "miss")
			counter(descICP, s.ICP.Denied, "denied")
			counter(descICP, s.ICP.Timeouts, "timeout")
			gauge(descICPRTT, s.ICP.MeanRTT.Seconds())
		}
		for _, st := range []peers.AdminState{peers.Enabled, peers.Drain, peers.Maintenance} {
			v := 0.0
			if s.Admin == st {
				v = 1
			}
			gauge(descAdminDesc, v, st.String())
		}
		counter(descBytes, s.BytesSent, "sent")
		counter(descBytes, s.BytesReceived, "received")
	}
}
