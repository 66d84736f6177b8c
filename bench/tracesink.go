package main

// This file holds the span sink of the traced throughput row: an OTLP/HTTP
// collector on loopback that reads what peerd posts to /v1/traces and
// counts it, so the row measures tracing's cost, export included.

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
)

type spanSink struct {
	*httptest.Server
	Addr  string
	posts atomic.Int64
}

func startSpanSink() *spanSink {
	s := &spanSink{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/v1/traces" {
			s.posts.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, "{}")
	}))
	s.Addr = strings.TrimPrefix(s.URL, "http://")
	return s
}
