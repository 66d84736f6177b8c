package tracing

// This file holds the exporter: a queue that requests hand their finished
// spans to without waiting, bounded in spans and in bytes (a span's bytes
// count until its batch was sent, so a collector that hangs holds at most
// maxQueueBytes of spans), and a goroutine that sends them in batches to
// the collector's /v1/traces as OTLP/HTTP JSON (hex trace and span IDs,
// times as decimal strings of Unix nanoseconds). A span is copied as it
// is queued, its strings cut to maxAttrBytes; what is dropped is counted
// (Drops) and logged once.

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/sirupsen/logrus"
)

// Exporter sends spans to one collector.
type Exporter struct {
	cfg    Config
	url    string
	log    logrus.FieldLogger
	client *http.Client
	queue  chan Span
	// bytes are the bytes of the spans queued or in a batch not yet sent.
	bytes atomic.Int64
	drops *Drops
	once  sync.Once
	stop  chan struct{}
	done  chan struct{}
}

// Drops counts the spans dropped by every exporter of a process (a reload
// replaces the exporter, not the count), and logs the first once.
type Drops struct {
	n      atomic.Int64
	logged atomic.Bool
}

// Total is the spans dropped so far.
func (d *Drops) Total() int64 { return d.n.Load() }

// Batch sizes, bounds and timing.
const (
	queueSize     = 8192
	batchSize     = 512
	maxQueueBytes = 8 << 20 // the spans held, queued or being sent
	maxAttrBytes  = 4 << 10 // one attribute's value (a URL) in a span
	flushEvery    = time.Second
	sendTimeout   = 5 * time.Second
)

// NewExporter makes an exporter for cfg (cfg.OTLPEndpoint set), counting
// what it drops in drops; Run starts it.
func NewExporter(cfg Config, log logrus.FieldLogger, drops *Drops) *Exporter {
	return &Exporter{
		cfg: cfg, url: strings.TrimRight(cfg.OTLPEndpoint, "/") + "/v1/traces", log: log, drops: drops,
		client: &http.Client{Timeout: sendTimeout},
		queue:  make(chan Span, queueSize), stop: make(chan struct{}), done: make(chan struct{}),
	}
}

// Config is what the exporter was made with.
func (e *Exporter) Config() Config { return e.cfg }

// Export queues a copy of a finished span; a full queue (in spans or in
// bytes) drops it, counted.
func (e *Exporter) Export(s Span) {
	n := s.size() // (the copy's: a span dropped is never copied)
	if e.bytes.Add(n) > maxQueueBytes {
		e.bytes.Add(-n)
		e.drop(1)
		return
	}
	s = s.own()
	select {
	case e.queue <- s:
	default:
		e.bytes.Add(-n)
		e.drop(1)
	}
}

// drop counts n spans lost, and logs the first of the process's.
func (e *Exporter) drop(n int) {
	e.drops.n.Add(int64(n))
	if e.drops.logged.CompareAndSwap(false, true) {
		e.log.WithFields(logrus.Fields{"endpoint": e.cfg.OTLPEndpoint, "queue_spans": queueSize, "queue_bytes": maxQueueBytes}).
			Warn("trace: the export queue is full (the collector is slow or down): spans are dropped, counted in peerd_trace_spans_dropped_total (logged once)")
	}
}

// own is a copy of s that shares no memory with the request it came
// from, each string cut to maxAttrBytes.
func (s Span) own() Span {
	s.Name, s.Error = clip(s.Name), clip(s.Error)
	attrs := make([]Attr, len(s.Attrs))
	for i, a := range s.Attrs {
		a.Key, a.Str = clip(a.Key), clip(a.Str)
		attrs[i] = a
	}
	s.Attrs = attrs
	return s
}

// clip is a copy of v, at most maxAttrBytes long (cut on a rune's start).
func clip(v string) string { return strings.Clone(v[:clipLen(v)]) }

// clipLen is the length of clip(v).
func clipLen(v string) int {
	n := len(v)
	if n > maxAttrBytes {
		n = maxAttrBytes
		for n > 0 && !utf8.RuneStart(v[n]) {
			n--
		}
	}
	return n
}

// spanOverhead is what a span holds besides its strings.
const spanOverhead = int64(unsafe.Sizeof(Span{}))

// size is the bytes s's copy holds (s.own(), its strings clipped; the
// same for a copy and its original).
func (s Span) size() int64 {
	n := spanOverhead + int64(clipLen(s.Name)+clipLen(s.Error))
	for _, a := range s.Attrs {
		n += int64(unsafe.Sizeof(a)) + int64(clipLen(a.Key)+clipLen(a.Str))
	}
	return n
}

// Run sends batches until Close; the last batch is sent before it returns.
func (e *Exporter) Run() {
	defer close(e.done)
	tick := time.NewTicker(flushEvery)
	defer tick.Stop()
	batch := make([]Span, 0, batchSize)
	flush := func() {
		if len(batch) > 0 {
			e.send(batch)
			var n int64
			for i := range batch {
				n += batch[i].size()
				batch[i] = Span{} // the batch's array does not keep the spans
			}
			e.bytes.Add(-n)
			batch = batch[:0]
		}
	}
	for {
		select {
		case s := <-e.queue:
			if batch = append(batch, s); len(batch) >= batchSize {
				flush()
			}
		case <-tick.C:
			flush()
		case <-e.stop:
			for {
				select {
				case s := <-e.queue:
					batch = append(batch, s)
				default:
					flush()
					return
				}
			}
		}
	}
}

// Close stops the exporter after sending what is queued.
func (e *Exporter) Close() {
	e.once.Do(func() { close(e.stop) })
	<-e.done
}

// send posts one batch; a failure is logged at debug level with the
// count lost (tracing never troubles the proxy).
func (e *Exporter) send(batch []Span) {
	body := e.encode(batch)
	ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			err = &statusError{resp.StatusCode}
		}
	}
	if err != nil {
		e.log.WithFields(logrus.Fields{"spans": len(batch), "err": err.Error()}).Debug("trace: export failed")
	}
}

type statusError struct{ code int }

func (s *statusError) Error() string { return "collector answered " + strconv.Itoa(s.code) }

// OTLP/JSON shapes.
type (
	otlpValue struct {
		StringValue *string `json:"stringValue,omitempty"`
		IntValue    *string `json:"intValue,omitempty"`
	}
	otlpAttr struct {
		Key   string    `json:"key"`
		Value otlpValue `json:"value"`
	}
	otlpStatus struct {
		Code    int    `json:"code,omitempty"`
		Message string `json:"message,omitempty"`
	}
	otlpSpan struct {
		TraceID      string     `json:"traceId"`
		SpanID       string     `json:"spanId"`
		ParentSpanID string     `json:"parentSpanId,omitempty"`
		Name         string     `json:"name"`
		Kind         int        `json:"kind"`
		Start        string     `json:"startTimeUnixNano"`
		End          string     `json:"endTimeUnixNano"`
		Attributes   []otlpAttr `json:"attributes,omitempty"`
		Status       otlpStatus `json:"status"`
	}
)

func attrsOf(as []Attr) []otlpAttr {
	out := make([]otlpAttr, len(as))
	for i, a := range as {
		out[i].Key = a.Key
		if a.IsI {
			v := strconv.FormatInt(a.Int, 10)
			out[i].Value.IntValue = &v
		} else {
			v := a.Str
			out[i].Value.StringValue = &v
		}
	}
	return out
}

// encode is the ExportTraceServiceRequest of a batch.
func (e *Exporter) encode(batch []Span) []byte {
	spans := make([]otlpSpan, len(batch))
	for i, s := range batch {
		o := otlpSpan{TraceID: hex.EncodeToString(s.Trace[:]), SpanID: hex.EncodeToString(s.ID[:]), Name: s.Name, Kind: int(s.Kind),
			Start: strconv.FormatInt(s.Start.UnixNano(), 10), End: strconv.FormatInt(s.End.UnixNano(), 10), Attributes: attrsOf(s.Attrs)}
		if s.Parent != (SpanID{}) {
			o.ParentSpanID = hex.EncodeToString(s.Parent[:])
		}
		if s.Error != "" {
			o.Status = otlpStatus{Code: 2, Message: s.Error} // STATUS_CODE_ERROR
		}
		spans[i] = o
	}
	doc := map[string]any{"resourceSpans": []any{map[string]any{
		"resource":   map[string]any{"attributes": attrsOf([]Attr{String("service.name", e.cfg.ServiceName)})},
		"scopeSpans": []any{map[string]any{"scope": map[string]any{"name": "peerd"}, "spans": spans}},
	}}}
	b, _ := json.Marshal(doc)
	return b
}
