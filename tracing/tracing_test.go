package tracing

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

func TestParseTraceparent(t *testing.T) {
	for _, tc := range []struct {
		v       string
		valid   bool
		sampled bool
	}{
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true, true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true, false},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later", true, true}, // a later version's extra field
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", false, false},
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false, false},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false, false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false, false},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false, false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", false, false},
		{"", false, false},
	} {
		p := ParseTraceparent([]byte(tc.v))
		if p.Valid != tc.valid || p.Sampled != tc.sampled {
			t.Errorf("%q: valid %v sampled %v; want %v %v", tc.v, p.Valid, p.Sampled, tc.valid, tc.sampled)
		}
	}
	p := ParseTraceparent([]byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
	if got := string(AppendTraceparent(nil, p.Trace, p.Span)); got != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Fatalf("round trip: %s", got)
	}
}

// TestBeginSamples: the decision is the operator's: a client's sampled
// flag raises the rate only to parent_sample (by default not at all), its
// "not sampled" is followed; without one, the draw against sample
// decides, and a new trace is begun.
func TestBeginSamples(t *testing.T) {
	now := time.Now()
	yes := []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	no := []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
	if r := Begin(yes, 0.01, 0, 0.5, now); r != nil {
		t.Fatal("a client's sampled flag forced a trace the operator's sample 0.01 did not draw")
	}
	if r := Begin(yes, 0.01, 0.25, 0.5, now); r != nil {
		t.Fatal("a client's sampled flag went past parent_sample 0.25")
	}
	if r := Begin(yes, 0.01, 0.25, 0.2, now); r == nil || r.String() != "4bf92f3577b34da6a3ce929d0e0e4736" || r.parent == (SpanID{}) {
		t.Fatalf("a sampled parent within parent_sample: %+v; want traced under it", r)
	}
	if r := Begin(yes, 0.5, 0, 0.2, now); r == nil || r.parent == (SpanID{}) {
		t.Fatalf("a sampled parent drawn by sample: %+v; want traced under it", r)
	}
	if r := Begin(no, 1, 1, 0, now); r != nil {
		t.Fatal("a parent that is not sampled was traced")
	}
	if r := Begin(nil, 0.01, 1, 0.5, now); r != nil {
		t.Fatal("a draw of 0.5 at sample 0.01 was traced (parent_sample is for sampled parents only)")
	}
	r := Begin(nil, 0.01, 0, 0.001, now)
	if r == nil || r.Trace == (TraceID{}) || r.parent != (SpanID{}) {
		t.Fatalf("a draw of 0.001 at sample 0.01: %+v; want a new root trace", r)
	}
}

// TestExporterSendsOTLPJSON: spans reach the collector's /v1/traces as
// OTLP JSON, with the service name, hex IDs, the parent and the error
// status.
func TestExporterSendsOTLPJSON(t *testing.T) {
	got := make(chan []byte, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s %s", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		}
		b, _ := io.ReadAll(r.Body)
		got <- b
	}))
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.OTLPEndpoint, cfg.ServiceName = srv.URL+"/", "edge-proxy"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	e := NewExporter(cfg, logrus.New(), &Drops{})
	go e.Run()
	req := Begin([]byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), 0, 1, 0, time.Now())
	id, at := req.Attempt(time.Now())
	e.Export(Span{Trace: req.Trace, ID: id, Parent: req.ID, Name: "attempt p1", Kind: KindClient, Start: at, End: time.Now(),
		Attrs: []Attr{String("server.address", "p1"), Int("http.response.status_code", 502)}, Error: "502"})
	e.Export(req.Span("GET", time.Now(), []Attr{String("http.request.method", "GET")}, ""))
	e.Close()
	var doc struct {
		ResourceSpans []struct {
			Resource struct {
				Attributes []struct {
					Key   string
					Value struct{ StringValue string }
				}
			}
			ScopeSpans []struct {
				Spans []struct {
					TraceID, SpanID, ParentSpanID, Name string
					Kind                                int
					StartTimeUnixNano                   string
					Status                              struct{ Code int }
				}
			}
		}
	}
	select {
	case b := <-got:
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%v\n%s", err, b)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing reached the collector")
	}
	rs := doc.ResourceSpans[0]
	if rs.Resource.Attributes[0].Key != "service.name" || rs.Resource.Attributes[0].Value.StringValue != "edge-proxy" {
		t.Fatalf("resource %+v", rs.Resource)
	}
	spans := rs.ScopeSpans[0].Spans
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	a, s := spans[0], spans[1]
	if a.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || a.ParentSpanID != s.SpanID || a.Kind != 3 || a.Status.Code != 2 {
		t.Fatalf("attempt span %+v (request span %s)", a, s.SpanID)
	}
	if s.ParentSpanID != "00f067aa0ba902b7" || s.Kind != 2 || s.Status.Code != 0 || s.StartTimeUnixNano == "" {
		t.Fatalf("request span %+v", s)
	}
	for _, bad := range []Config{{OTLPEndpoint: "collector:4318", Sample: 0.1, ServiceName: "p"}, {Sample: 2, ServiceName: "p"}, {Sample: 0.1}} {
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "trace.") {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

// TestExportCopiesWhatItKeeps: a span queued from a request's buffer
// keeps its own copy (the buffer is reused by the next request on the
// connection), its strings cut to maxAttrBytes.
func TestExportCopiesWhatItKeeps(t *testing.T) {
	got := make(chan []byte, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- b
	}))
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.OTLPEndpoint = srv.URL
	e := NewExporter(cfg, logrus.New(), &Drops{})
	go e.Run()
	buf := []byte("http://one.example/a")
	view := unsafe.String(unsafe.SliceData(buf), len(buf))
	long := strings.Repeat("x", 3*maxAttrBytes)
	e.Export(Span{Trace: newTraceID(), ID: newSpanID(), Name: "GET", Attrs: []Attr{String("url.full", view), String("long", long)}})
	copy(buf, "http://two.example/b") // the next request on the connection
	e.Close()
	b := <-got
	if !strings.Contains(string(b), "http://one.example/a") || strings.Contains(string(b), "two.example") {
		t.Fatalf("the span does not name its own request:\n%s", b)
	}
	if strings.Contains(string(b), strings.Repeat("x", maxAttrBytes+1)) || !strings.Contains(string(b), strings.Repeat("x", maxAttrBytes)) {
		t.Fatalf("an attribute of %d bytes was not cut to %d", len(long), maxAttrBytes)
	}
}

// TestExportBoundedInBytes: with a collector that never answers, the
// spans held (queued or in a batch being sent) stay within maxQueueBytes
// whatever their size; the rest are dropped, counted, and logged once.
func TestExportBoundedInBytes(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.OTLPEndpoint = srv.URL
	log, hook := logtest.NewNullLogger()
	drops := &Drops{}
	e := NewExporter(cfg, log, drops)
	go e.Run()
	url := "http://big.example/" + strings.Repeat("u", 60<<10)
	const n = 6000 // 6000 × 60 KiB: 350 MiB if spans held requests' URLs whole
	for range n {
		e.Export(Span{Trace: newTraceID(), ID: newSpanID(), Name: "GET", Attrs: []Attr{String("url.full", url)}})
		if held := e.bytes.Load(); held > maxQueueBytes {
			t.Fatalf("%d bytes of spans held; the bound is %d", held, maxQueueBytes)
		}
	}
	if drops.Total() == 0 || drops.Total() >= n {
		t.Fatalf("%d of %d spans dropped; want some kept and the rest dropped", drops.Total(), n)
	}
	warned := 0
	for _, en := range hook.AllEntries() {
		if en.Level == logrus.WarnLevel {
			warned++
		}
	}
	if warned != 1 {
		t.Fatalf("%d warnings for %d dropped spans; want one", warned, drops.Total())
	}
	close(release)
	e.Close()
	if held := e.bytes.Load(); held != 0 {
		t.Fatalf("%d bytes still counted after every batch was sent", held)
	}
}
