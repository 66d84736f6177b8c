package e2e

// Traces that pin nothing and leak nothing (issue 64), through the
// binary: every span on a keep-alive connection names its own request,
// with the query cut as the access log cuts it; a refused request has no
// span unless [trace] refused; a collector that never answers costs
// peerd a bounded amount of memory whatever URLs clients send, and the
// spans it could not keep are counted in /metrics.

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/peerd/peerd/internal/testbed"
)

func TestTraceSpansNameTheirOwnRequest(t *testing.T) {
	t.Parallel()
	col := newCollector(t)
	par := newRawParent(t, "a", func(r *http.Request) string { return okAnswer("Cache-Control: no-store\r\n", "ok") })
	cfg := baseConfig + peerBlock("", par) + fmt.Sprintf("[trace]\notlp_endpoint = %q\nsample = 1.0\n", col.url) +
		"\n[[rule]]\naction = \"deny\"\ndomains = [\"refused.test\"]\n"
	p := startPeerd(t, cfg)
	c, err := net.Dial("tcp", p.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	const n = 120
	traceOf := func(i int) string { return fmt.Sprintf("%032x", 0xabc000+i) }
	for i := range n {
		host := "o.test"
		if i%10 == 9 {
			host = "refused.test"
		}
		// Long and short URLs alternate, so a span pointing into the
		// connection's buffer would show another request's bytes.
		path := fmt.Sprintf("/r%d-%s", i, strings.Repeat("p", (i%3)*700))
		fmt.Fprintf(c, "GET http://%s%s?token=SECRET%d HTTP/1.1\r\nHost: %s\r\ntraceparent: 00-%s-00f067aa0ba902b7-01\r\n\r\n", host, path, i, host, traceOf(i))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		resp.Body.Close()
		if want := map[bool]int{true: 403, false: 200}[host == "refused.test"]; resp.StatusCode != want {
			t.Fatalf("request %d to %s: %d; want %d", i, host, resp.StatusCode, want)
		}
	}
	waitFor(t, "the last served request's span at the collector", 15*time.Second, func() bool { return len(col.trace(traceOf(n-2))) > 0 })
	for i := range n {
		spans := col.trace(traceOf(i))
		if i%10 == 9 {
			if len(spans) != 0 {
				t.Errorf("request %d was refused (403) and has %d spans; [trace] refused is off", i, len(spans))
			}
			continue
		}
		var server *otlpSpan
		for j := range spans {
			if spans[j].Kind == 2 {
				server = &spans[j]
			}
		}
		if server == nil {
			t.Errorf("request %d: no server span", i)
			continue
		}
		want := fmt.Sprintf("http://o.test/r%d-%s?", i, strings.Repeat("p", (i%3)*700))
		if got := server.attr("url.full"); got != want {
			t.Errorf("request %d: url.full %.80q; want %.80q (its own URL, query cut)", i, got, want)
		}
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	for _, s := range col.spans {
		for _, a := range s.Attributes {
			if strings.Contains(a.Value.StringValue, "SECRET") {
				t.Fatalf("a span's %s carries the query: %.100q", a.Key, a.Value.StringValue)
			}
		}
	}
}

// TestTraceHangingCollectorBoundsMemory: a collector that accepts and
// never answers, every request sampled, URLs of 60 KB: peerd's resident
// memory grows by at most 64 MiB (docs/observability.md says so), and the
// spans it dropped are counted.
func TestTraceHangingCollectorBoundsMemory(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // read nothing, answer nothing
		}
	}()
	par := newRawParent(t, "a", func(r *http.Request) string { return okAnswer("Cache-Control: no-store\r\n", "ok") })
	cfg := strings.Replace(baseConfig, "[proxy]\n", "[proxy]\nmax_header_size = \"128KiB\"\n", 1) + peerBlock("", par) +
		fmt.Sprintf("[trace]\notlp_endpoint = \"%s\"\nsample = 1.0\n", "http://"+ln.Addr().String())
	p := startPeerdBin(t, plainPeerdBin(t), cfg) // without -race: its shadow memory is not peerd's
	pid := p.Cmd.Process.Pid
	warm := func(k int) {
		resp, err := p.client().Get(fmt.Sprintf("http://o.test/warm%d", k))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for k := range 20 {
		warm(k)
	}
	before := testbed.RSSMiB(pid)
	const conns, each = 8, 250 // 2,000 requests with a 60 KB URL: 120 MB of heads
	errs := make(chan error, conns)
	for w := range conns {
		go func() {
			errs <- func() error {
				c, err := net.Dial("tcp", p.proxy)
				if err != nil {
					return err
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(2 * time.Minute))
				br := bufio.NewReader(c)
				for i := range each {
					url := fmt.Sprintf("http://o.test/w%d-%d/%s?q=%d", w, i, strings.Repeat("u", 60000), i)
					fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: o.test\r\nUser-Agent: %s\r\n\r\n", url, strings.Repeat("a", 2000))
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						return fmt.Errorf("worker %d request %d: %v", w, i, err)
					}
					resp.Body.Close()
				}
				return nil
			}()
		}()
	}
	for range conns {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	after := testbed.RSSMiB(pid)
	t.Logf("RSS %.1f MiB before, %.1f MiB after %d requests with 60 KB URLs, all sampled, the collector hanging", before, after, conns*each)
	if after-before > 64 {
		t.Fatalf("RSS grew by %.1f MiB with the collector hanging; the bound is 64 MiB", after-before)
	}
	if d := metricValue(p.adminMetrics(), "peerd_trace_spans_dropped_total"); d <= 0 {
		t.Fatalf("peerd_trace_spans_dropped_total = %v; want the spans a hanging collector cost counted", d)
	}
	if !strings.Contains(p.Logs(), "spans are dropped") {
		t.Fatal("no log line says spans are dropped")
	}
}
