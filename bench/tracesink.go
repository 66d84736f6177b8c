package main

// This file holds the span sink of the traced throughput row: an OTLP/HTTP
// collector on loopback that reads what peerd posts to /v1/traces and
// counts it, so the row measures tracing's cost, export included.

import (
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

type spanSink struct {
	Addr  string
	posts atomic.Int64
	srv   *http.Server
}

func startSpanSink() *spanSink {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	s := &spanSink{Addr: ln.Addr().String()}
	s.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/v1/traces" {
			s.posts.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, "{}")
	})}
	go s.srv.Serve(ln)
	return s
}

// Close stops the sink.
func (s *spanSink) Close() { s.srv.Close() }
