package forwarding

// This file holds the proxy's side of tracing ([trace], package
// tracing): the sampling decision when a request is read (the
// operator's: [trace] sample, parent_sample), one span per
// attempt at a next hop (its ID sent on as traceparent, so the parent's
// spans hang under it; the span's type is in attempt.go), and the
// request's own span (ended by finishTrace in txn.go), its url.full cut
// as the access log cuts it, none for a refused request unless [trace]
// refused.
// An untraced request costs a nil test at each of these points.

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/peerd/peerd/tracing"
)

// SetTracer puts e in force for new requests (nil: tracing off).
func (p *Proxy) SetTracer(e *tracing.Exporter) { p.tracer.Store(e) }

// beginTrace decides whether the request just parsed is traced.
func (tx *txn) beginTrace() {
	if e := tx.p.tracer.Load(); e != nil {
		cfg := e.Config()
		tx.rq.trace = tracing.Begin(tx.rq.req.Get("Traceparent"), cfg.Sample, cfg.ParentSample, rand.Float64(), tx.rq.start)
	}
}

// refused says peerd turned the request away itself (access, loop,
// authentication, a bad request): no span unless [trace] refused.
func (tx *txn) refused() bool {
	switch tx.code {
	case CodeAccessDenied, CodeAuthRequired, CodeAuthSlowed, CodeBadRequest, CodeLoopDetected, CodeDenied, CodeRequestTimeout:
		return !tx.hopped
	}
	return false
}

// traceURL is url.full as the access log writes it (its query cut unless
// strip_query_terms is off); the exporter copies it.
func (tx *txn) traceURL() string {
	u := tx.rq.req.Target
	if !tx.rq.gen.keepQuery {
		if i := bytes.IndexByte(u, '?'); i >= 0 {
			u = u[:i+1]
		}
	}
	return urlString(u)
}

// beginSpan starts a's span when its request is traced.
func (a *attempt) beginSpan(rq *request) {
	if rq.trace == nil || a.span != nil {
		return
	}
	id, at := rq.trace.Attempt(time.Now())
	a.span = &attemptSpan{trace: rq.trace, id: id, start: at}
}

// endSpan exports a's span, once.
func (a *attempt) endSpan() {
	s := a.span
	if s == nil {
		return
	}
	a.span = nil
	e := a.h.tracer.Load()
	if e == nil {
		return
	}
	attrs := []tracing.Attr{tracing.String("server.address", hopName(a.hop))}
	if a.hop.Peer == nil {
		attrs[0] = tracing.String("server.address", "DIRECT")
	}
	failed := ""
	switch {
	case a.err != nil:
		failed = a.err.Error()
	case a.status > 0:
		attrs = append(attrs, tracing.Int("http.response.status_code", int64(a.status)))
		if a.status >= 500 {
			failed = strconv.Itoa(a.status)
		}
	}
	e.Export(tracing.Span{Trace: s.trace.Trace, ID: s.id, Parent: s.trace.ID, Name: "attempt " + attrs[0].Str,
		Kind: tracing.KindClient, Start: s.start, End: time.Now(), Attrs: attrs, Error: failed})
}
