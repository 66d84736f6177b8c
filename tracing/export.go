package tracing

// This file holds the exporter: a bounded queue that requests hand their
// finished spans to without waiting, and a goroutine that sends them in
// batches to the collector's /v1/traces as OTLP/HTTP JSON (hex trace and
// span IDs, times as decimal strings of Unix nanoseconds).

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

	"github.com/sirupsen/logrus"
)

// Exporter sends spans to one collector.
type Exporter struct {
	cfg     Config
	url     string
	log     logrus.FieldLogger
	client  *http.Client
	queue   chan Span
	dropped atomic.Int64
	once    sync.Once
	stop    chan struct{}
	done    chan struct{}
}

// Batch sizes and timing.
const (
	queueSize   = 8192
	batchSize   = 512
	flushEvery  = time.Second
	sendTimeout = 5 * time.Second
)

// NewExporter makes an exporter for cfg (cfg.OTLPEndpoint set); Run
// starts it.
func NewExporter(cfg Config, log logrus.FieldLogger) *Exporter {
	return &Exporter{
		cfg: cfg, url: strings.TrimRight(cfg.OTLPEndpoint, "/") + "/v1/traces", log: log,
		client: &http.Client{Timeout: sendTimeout},
		queue:  make(chan Span, queueSize), stop: make(chan struct{}), done: make(chan struct{}),
	}
}

// Config is what the exporter was made with.
func (e *Exporter) Config() Config { return e.cfg }

// Export queues a finished span; a full queue drops it (counted).
func (e *Exporter) Export(s Span) {
	select {
	case e.queue <- s:
	default:
		e.dropped.Add(1)
	}
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
