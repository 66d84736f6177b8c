package main

// This file holds the metrics of the process itself: its build, its open
// client connections, its own stalls, the spans it could not export, and
// the last reload's result and time.

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peerd/peerd/admin"
)

// reloadRecord is the last reload's result and time.
type reloadRecord struct {
	ok atomic.Bool
	at atomic.Int64 // Unix seconds
}

func (r *reloadRecord) record(ok bool, at time.Time) {
	r.ok.Store(ok)
	r.at.Store(at.Unix())
}

// last is the last reload's result and time.
func (r *reloadRecord) last() (bool, time.Time) { return r.ok.Load(), time.Unix(r.at.Load(), 0) }

// registerServerMetrics adds peerd_build_info, peerd_client_connections
// and the reload gauges.
func (s *server) registerServerMetrics(reg prometheus.Registerer) {
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "peerd_build_info", Help: "1, labelled with peerd's version and the Go version it was built with.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
	})
	build.Set(1)
	reg.MustRegister(build,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "peerd_client_connections", Help: "Client connections open now (tunnels included).",
		}, func() float64 {
			if s.proxy == nil {
				return 0
			}
			return float64(s.proxy.OpenConnections())
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "peerd_trace_spans_dropped_total", Help: "Spans not exported because the export queue was full (in spans or in bytes): the collector is slow or down.",
		}, func() float64 { return float64(s.traceDrops.Total()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "peerd_stall_seconds_total", Help: "Time peerd itself was stalled (scheduling delays, GC, a stopped process), seen by stall_guard.",
		}, func() float64 { return s.stalls.Total().Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "peerd_config_last_reload_success", Help: "1 if the last config reload (or the start) succeeded, 0 if it was refused and the running config kept.",
		}, func() float64 {
			if ok, _ := s.reloads.last(); ok {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "peerd_config_last_reload_timestamp_seconds", Help: "When the last config reload (or the start) was tried, as a Unix time.",
		}, func() float64 {
			_, at := s.reloads.last()
			return float64(at.Unix())
		}),
	)
}

// facts are what the status page says of the process: the policy in
// force, when it started, and the last reload.
func (s *server) facts() admin.Facts {
	s.mu.Lock()
	policy := s.cfg.Selection.Policy.String()
	s.mu.Unlock()
	ok, at := s.reloads.last()
	return admin.Facts{Policy: policy, Started: s.started, ReloadOK: ok, ReloadAt: at}
}
