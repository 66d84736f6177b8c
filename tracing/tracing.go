// Package tracing is peerd's OpenTelemetry export ([trace], contract
// section 23): W3C trace context read from a client's request, a sampling
// decision per request that is the operator's ([trace] sample; a client's
// sampled flag may raise it only to parent_sample, and its "not sampled"
// lowers it to nothing), and spans (one per client request, one per
// attempt at a next hop) sent in batches over OTLP/HTTP with the JSON
// encoding, with no library beyond the standard one. An unsampled request
// costs a pointer test; a sampled one a few small allocations. A span
// copies every string it keeps (none points into a request's buffers),
// and the export happens off the request's path through a queue bounded
// in spans and in bytes (export.go): a full one drops spans, counted,
// never waits.
package tracing

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"time"

	"github.com/peerd/peerd/internal/conf"
)

// Config is the [trace] section.
type Config struct {
	// OTLPEndpoint is the collector's OTLP/HTTP base URL (spans go to its
	// /v1/traces); "" turns export off.
	OTLPEndpoint string `toml:"otlp_endpoint"`
	// Sample is the share of requests traced (0 to 1): the operator's
	// decision, whatever a client asks.
	Sample float64 `toml:"sample"`
	// ParentSample is the share of the requests whose client sent a
	// traceparent with the sampled flag that are traced (0 to 1; the
	// larger of it and Sample applies). 0: the flag asks for nothing
	// beyond Sample. A client's "not sampled" is always followed.
	ParentSample float64 `toml:"parent_sample"`
	// Refused traces requests peerd refused itself (access rules, bad
	// requests, authentication); by default they have no span.
	Refused bool `toml:"refused"`
	// ServiceName is the service.name resource attribute.
	ServiceName string `toml:"service_name"`
}

// DefaultConfig is export off, 1 % sampled, service "peerd".
func DefaultConfig() Config { return Config{Sample: 0.01, ServiceName: "peerd"} }

// Validate checks the section; errors name the key.
func (c Config) Validate() error {
	var es conf.Errors
	if c.OTLPEndpoint != "" {
		u, err := url.Parse(c.OTLPEndpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			es.Addf("trace", "otlp_endpoint", "%q is not an http:// or https:// URL (e.g. \"http://127.0.0.1:4318\")", c.OTLPEndpoint)
		}
	}
	if c.Sample < 0 || c.Sample > 1 {
		es.Addf("trace", "sample", "must be between 0 and 1, got %g", c.Sample)
	}
	if c.ParentSample < 0 || c.ParentSample > 1 {
		es.Addf("trace", "parent_sample", "must be between 0 and 1, got %g", c.ParentSample)
	}
	if c.ServiceName == "" {
		es.Addf("trace", "service_name", "must not be empty")
	}
	return es.Err()
}

// TraceID and SpanID are W3C trace context identifiers.
type (
	TraceID [16]byte
	SpanID  [8]byte
)

// newSpanID is a random span ID (never all zero).
func newSpanID() SpanID {
	var s SpanID
	for s == (SpanID{}) {
		rand.Read(s[:])
	}
	return s
}

// newTraceID is a random trace ID (never all zero).
func newTraceID() TraceID {
	var t TraceID
	for t == (TraceID{}) {
		rand.Read(t[:])
	}
	return t
}

// Parent is a client's trace context (traceparent), if it sent one.
type Parent struct {
	Trace   TraceID
	Span    SpanID
	Sampled bool
	Valid   bool
}

// ParseTraceparent reads "00-<32 hex>-<16 hex>-<2 hex>" (W3C Trace
// Context, version 00; a later version is read by the same first fields).
// Anything else is no parent.
func ParseTraceparent(v []byte) Parent {
	var p Parent
	if len(v) < 55 || v[2] != '-' || v[35] != '-' || v[52] != '-' || (len(v) > 55 && v[55] != '-') {
		return p
	}
	if string(v[:2]) == "ff" || !isHex(v[:2]) || !isHex(v[53:55]) {
		return p
	}
	if _, err := hex.Decode(p.Trace[:], v[3:35]); err != nil || !isLowerHex(v[3:35]) {
		return Parent{}
	}
	if _, err := hex.Decode(p.Span[:], v[36:52]); err != nil || !isLowerHex(v[36:52]) {
		return Parent{}
	}
	if p.Trace == (TraceID{}) || p.Span == (SpanID{}) || (string(v[:2]) == "00" && len(v) != 55) {
		return Parent{}
	}
	var flags [1]byte
	hex.Decode(flags[:], v[53:55])
	p.Sampled, p.Valid = flags[0]&1 == 1, true
	return p
}

func isHex(b []byte) bool {
	_, err := hex.DecodeString(string(b))
	return err == nil
}

func isLowerHex(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// AppendTraceparent appends the traceparent value for span of trace,
// sampled.
func AppendTraceparent(b []byte, t TraceID, s SpanID) []byte {
	b = append(b, "00-"...)
	b = hex.AppendEncode(b, t[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, s[:])
	return append(b, "-01"...)
}

// Kind is an OTLP span kind.
type Kind int

const (
	KindServer Kind = 2 // a client's request to peerd
	KindClient Kind = 3 // peerd's attempt at a next hop
)

// Attr is one span attribute (a string or an integer value).
type Attr struct {
	Key string
	Str string
	Int int64
	IsI bool
}

// String and Int make attributes.
func String(k, v string) Attr    { return Attr{Key: k, Str: v} }
func Int(k string, v int64) Attr { return Attr{Key: k, Int: v, IsI: true} }

// Span is one finished span.
type Span struct {
	Trace      TraceID
	ID, Parent SpanID
	Name       string
	Kind       Kind
	Start, End time.Time
	Attrs      []Attr
	Error      string // "" for a span that did not fail
}

// Request is the trace of one sampled client request: its span, and the
// attempts' spans under it.
type Request struct {
	Trace  TraceID
	ID     SpanID
	parent SpanID
	Start  time.Time
}

// Begin decides whether a request is traced, from a draw in [0, 1): the
// operator's sample; a client's sampled flag raises it to parentSample at
// most, and its "not sampled" is followed. nil means not traced.
func Begin(tp []byte, sample, parentSample float64, draw float64, now time.Time) *Request {
	p := ParseTraceparent(tp)
	rate := sample
	if p.Valid && p.Sampled {
		rate = max(sample, parentSample)
	}
	if p.Valid && !p.Sampled || draw >= rate {
		return nil
	}
	r := &Request{ID: newSpanID(), Start: now}
	if p.Valid {
		r.Trace, r.parent = p.Trace, p.Span
	} else {
		r.Trace = newTraceID()
	}
	return r
}

// Attempt starts an attempt's span under the request: its ID goes to the
// next hop in traceparent.
func (r *Request) Attempt(now time.Time) (SpanID, time.Time) { return newSpanID(), now }

// Span is the request's own span, ended at end.
func (r *Request) Span(name string, end time.Time, attrs []Attr, failed string) Span {
	return Span{Trace: r.Trace, ID: r.ID, Parent: r.parent, Name: name, Kind: KindServer, Start: r.Start, End: end, Attrs: attrs, Error: failed}
}

// String is the request's trace ID, for a log line.
func (r *Request) String() string { return fmt.Sprintf("%x", r.Trace[:]) }
