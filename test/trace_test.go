package e2e

// Traces through the binary: with [trace] on and every request sampled,
// a request's span and its attempt's span reach an OTLP/HTTP collector,
// and the parent gets a traceparent naming the attempt; a client's
// decision not to sample is kept, and its traceparent passes unchanged.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

type otlpSpan struct {
	TraceID, SpanID, ParentSpanID, Name string
	Kind                                int
	Attributes                          []struct {
		Key   string
		Value struct{ StringValue string }
	}
}

// attr is a string attribute of the span ("" when absent).
func (s otlpSpan) attr(key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value.StringValue
		}
	}
	return ""
}

// collector is a loopback OTLP/HTTP endpoint that keeps what it gets.
type collector struct {
	mu    sync.Mutex
	spans []otlpSpan
	url   string
}

func newCollector(t *testing.T) *collector {
	c := &collector{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var doc struct {
			ResourceSpans []struct {
				ScopeSpans []struct{ Spans []otlpSpan }
			}
		}
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/v1/traces" || json.Unmarshal(b, &doc) != nil {
			http.Error(w, "not OTLP JSON", 400)
			return
		}
		c.mu.Lock()
		for _, rs := range doc.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				c.spans = append(c.spans, ss.Spans...)
			}
		}
		c.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	c.url = srv.URL
	return c
}

func (c *collector) trace(id string) []otlpSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []otlpSpan
	for _, s := range c.spans {
		if s.TraceID == id {
			out = append(out, s)
		}
	}
	return out
}

func TestTracesReachTheCollector(t *testing.T) {
	t.Parallel()
	col := newCollector(t)
	seen := make(chan string, 8)
	par := newRawParent(t, "a", func(r *http.Request) string {
		seen <- r.Header.Get("Traceparent")
		return okAnswer("Cache-Control: no-store\r\n", "traced")
	})
	cfg := baseConfig + peerBlock("", par) + fmt.Sprintf("[trace]\notlp_endpoint = %q\nsample = 1.0\nservice_name = \"edge\"\n", col.url)
	p := startPeerd(t, cfg)
	get := func(tp string) string {
		t.Helper()
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://o.test/t%d", time.Now().UnixNano()), nil)
		if tp != "" {
			req.Header.Set("traceparent", tp)
		}
		resp, err := p.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		select {
		case h := <-seen:
			return h
		case <-time.After(10 * time.Second):
			t.Fatal("the request never reached the parent")
		}
		return ""
	}
	// The client's sampled trace: peerd's request span under the
	// client's span, its attempt under that, and the parent told the
	// attempt's span.
	const clientTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	upstream := get(clientTP)
	f := strings.Split(upstream, "-")
	if len(f) != 4 || f[1] != "4bf92f3577b34da6a3ce929d0e0e4736" || f[2] == "00f067aa0ba902b7" || f[3] != "01" {
		t.Fatalf("the parent got traceparent %q; want the client's trace with peerd's attempt as parent", upstream)
	}
	var spans []otlpSpan
	waitFor(t, "two spans of the client's trace at the collector", 10*time.Second, func() bool {
		spans = col.trace("4bf92f3577b34da6a3ce929d0e0e4736")
		return len(spans) >= 2
	})
	var server, client *otlpSpan
	for i := range spans {
		switch spans[i].Kind {
		case 2:
			server = &spans[i]
		case 3:
			client = &spans[i]
		}
	}
	if server == nil || client == nil || server.ParentSpanID != "00f067aa0ba902b7" || client.ParentSpanID != server.SpanID || client.SpanID != f[2] {
		t.Fatalf("spans %+v; want a server span under the client's and a client span (the parent's traceparent) under it", spans)
	}
	// A client that decided not to sample: nothing exported, and its
	// traceparent reaches the parent as it was.
	const unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	if got := get(unsampled); got != unsampled {
		t.Fatalf("an unsampled traceparent reached the parent as %q", got)
	}
	// Sampled at 1.0 without a traceparent: a new trace, told upstream.
	fresh := get("")
	if !strings.HasPrefix(fresh, "00-") || !strings.HasSuffix(fresh, "-01") {
		t.Fatalf("a new trace: the parent got traceparent %q", fresh)
	}
	// Spans leave in order: once the new trace's are in, any of the
	// unsampled request's (sent before it) would be too.
	waitFor(t, "the new trace exported", 10*time.Second, func() bool { return len(col.trace(strings.Split(fresh, "-")[1])) >= 2 })
	if n := len(col.trace("0af7651916cd43dd8448eb211c80319c")); n != 0 {
		t.Fatalf("%d spans of the unsampled trace exported", n)
	}
}
