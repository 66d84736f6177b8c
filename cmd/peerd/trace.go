package main

// This file holds the wiring of [trace]: the span exporter is started
// with the config, replaced by a reload that changes the section (the old
// one sends what it holds, then stops), and closed at the stop; the
// spans every exporter dropped are one count (traceDrops).

import (
	"github.com/peerd/peerd/tracing"
)

// applyTrace puts cfg in force: a new exporter when it changed, none
// when otlp_endpoint is "".
func (s *server) applyTrace(cfg tracing.Config) {
	old := s.tracer
	if old != nil && old.Config() == cfg {
		return
	}
	var e *tracing.Exporter
	if cfg.OTLPEndpoint != "" {
		e = tracing.NewExporter(cfg, s.log.WithField("component", "trace"), &s.traceDrops)
		go e.Run()
	}
	s.tracer = e
	s.proxy.SetTracer(e)
	if old != nil {
		go old.Close()
	}
}

// closeTrace sends the spans still queued and stops the exporter.
func (s *server) closeTrace() {
	if s.tracer != nil {
		s.tracer.Close()
	}
}
