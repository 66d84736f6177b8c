package main

// This file holds the suite's OTLP/HTTP collector (I7): every member
// exports spans to it (the client's traceparent sampled, parent_sample 1,
// so every exchange is traced), and each request span must name its own
// exchange's URL: the trace ID is the exchange's number, and the schedule
// says what that exchange asked. The collector hangs now and then (it
// takes a batch and answers nothing for a while), so that the members'
// export queues fill and drop, which must cost them nothing else.

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// collector receives the members' spans.
type collector struct {
	seed    uint64
	start   time.Time
	url     string
	srv     *http.Server
	mu      sync.Mutex
	checked int
	bad     []string
}

// hangEvery and hangFor: for hangFor of every hangEvery the collector
// answers nothing.
const (
	hangEvery = 10 * time.Second
	hangFor   = 3 * time.Second
)

func newCollector(seed uint64, start time.Time) (*collector, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &collector{seed: seed, start: start, url: "http://" + ln.Addr().String()}
	c.srv = &http.Server{Handler: http.HandlerFunc(c.take), ReadHeaderTimeout: 5 * time.Second}
	go c.srv.Serve(ln)
	return c, nil
}

func (c *collector) close() { c.srv.Close() }

// take reads one export and checks its request spans.
func (c *collector) take(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		return
	}
	if time.Since(c.start)%hangEvery < hangFor {
		select { // hang: the exporter's own timeout ends it
		case <-r.Context().Done():
		case <-time.After(hangFor):
		}
		return
	}
	var doc struct {
		ResourceSpans []struct {
			ScopeSpans []struct {
				Spans []struct {
					TraceID    string
					Kind       int
					Attributes []struct {
						Key   string
						Value struct{ StringValue string }
					}
				}
			}
		}
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		http.Error(w, err.Error(), 400)
		c.violate(fmt.Sprintf("an export that is not OTLP JSON: %v", err))
		return
	}
	for _, rs := range doc.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				if s.Kind != 2 {
					continue
				}
				url := ""
				for _, a := range s.Attributes {
					if a.Key == "url.full" {
						url = a.Value.StringValue
					}
				}
				c.check(s.TraceID, url)
			}
		}
	}
}

// check: the span of exchange id names that exchange's URL.
func (c *collector) check(traceID, url string) {
	raw, err := hex.DecodeString(traceID)
	if err != nil || len(raw) != 16 {
		c.violate(fmt.Sprintf("a span with trace ID %q", traceID))
		return
	}
	id, err := strconv.ParseUint(hex.EncodeToString(raw[8:]), 16, 64)
	if err != nil || raw[0] != 0xc4 {
		return // not one of the client's traces (a member's own request)
	}
	e := exchangeFor(c.seed, id)
	want := "http://origin.chaos.test" + e.path()
	if e.kind == tunnel {
		want = e.path()
	}
	if url != want {
		c.violate(fmt.Sprintf("exchange %d (%s): its span names %.120q, not its URL %q", id, e.kind, url, want))
		return
	}
	c.mu.Lock()
	c.checked++
	c.mu.Unlock()
}

func (c *collector) violate(line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bad = append(c.bad, line)
}

// traceparent is exchange id's: trace ID c4 00.. then the id, sampled.
func traceparent(id uint64) string {
	return fmt.Sprintf("00-c4%014x%016x-00f067aa0ba902b7-01", 0, id)
}

// checkSpans: I7, from what the collector saw.
func (r *report) checkSpans(c *collector) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans = c.checked
	for _, b := range c.bad {
		r.violate("I7", fmt.Sprintf("seed %d: %s", r.seed, b))
	}
}
