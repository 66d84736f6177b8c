package admin

// This file holds the per-peer histograms of connect and answer-head
// times, peerd_peer_connect_seconds{peer} and peerd_peer_head_seconds
// {peer}: classic buckets for every Prometheus, native buckets beside them
// for a server that scrapes them (protobuf).

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/peerd/peerd/peers"
)

// PeerTimings are the two histogram vectors; they are peers.Timings.
type PeerTimings struct {
	connect, head *prometheus.HistogramVec
}

// NewPeerTimings makes the histograms; register them with Collectors.
func NewPeerTimings() *PeerTimings {
	vec := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: name, Help: help, Buckets: buckets,
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  160,
			NativeHistogramMinResetDuration: 0,
		}, []string{"peer"})
	}
	return &PeerTimings{
		connect: vec("peerd_peer_connect_seconds", "Time of each successful TCP connect to the peer (requests, tunnels and probes).",
			[]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}),
		head: vec("peerd_peer_head_seconds", "Time from a request written to a parent to its answer's head (answers that came, without peerd's own stalls).",
			[]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}),
	}
}

// Collectors are what to register.
func (t *PeerTimings) Collectors() []prometheus.Collector {
	return []prometheus.Collector{t.connect, t.head}
}

// For is peer's two series.
func (t *PeerTimings) For(peer string) (connect, head peers.Timing) {
	return t.connect.WithLabelValues(peer), t.head.WithLabelValues(peer)
}

// Forget drops peer's series.
func (t *PeerTimings) Forget(peer string) {
	t.connect.DeleteLabelValues(peer)
	t.head.DeleteLabelValues(peer)
}
