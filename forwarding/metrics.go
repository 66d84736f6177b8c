package forwarding

// This file holds the proxy's Prometheus metrics.

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the proxy-wide Prometheus metrics. Per-peer metrics are read
// from the registry by the admin package, not counted twice here.
type Metrics struct {
	requests  *prometheus.CounterVec
	duration  prometheus.Histogram
	retries   *prometheus.CounterVec
	exhausted prometheus.Counter
	hedges    prometheus.Counter
	// hedgedRequests counts requests also sent to the next hop because
	// their parent's head was late.
	hedgedRequests prometheus.Counter
	// hedgesRefused counts hedges hedge_budget did not allow.
	hedgesRefused prometheus.Counter
	refused       prometheus.Counter
	// unsolicited counts connections closed because a next hop sent bytes
	// past its answer, by hop (peer name or DIRECT).
	unsolicited *prometheus.CounterVec
	// clientIn and clientOut count the bytes clients sent peerd (heads,
	// bodies, tunnels) and the bytes peerd sent them.
	clientIn, clientOut prometheus.Counter
	clientBytes         *prometheus.CounterVec
	// files records running out of file descriptors (files.go).
	files *fileLimit

	mu    sync.RWMutex // guards byKey
	byKey map[requestKey]prometheus.Counter
}

// NewMetrics creates the collectors; register them with Register.
func NewMetrics() *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "peerd_requests_total", Help: "Client requests by status code and hierarchy code.",
		}, []string{"code", "hierarchy"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "peerd_request_duration_seconds", Help: "Time from request to the end of the response.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "peerd_retries_total", Help: "Attempts on a further next hop, by reason.",
		}, []string{"reason"}),
		exhausted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "peerd_retry_budget_exhausted_total", Help: "Retries refused because the retry budget was spent.",
		}),
		hedges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "peerd_connect_hedges_total", Help: "Parallel connects started because a connect was slower than its hedge delay.",
		}),
		hedgedRequests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "peerd_hedged_requests_total", Help: "Requests also sent to the next hop because their parent's response head was late.",
		}),
		hedgesRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "peerd_hedges_refused_total", Help: "Hedges of late requests not sent because hedge_budget was spent.",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "peerd_client_connections_refused_total", Help: "Client connections closed at once because max_connections were open.",
		}),
		unsolicited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "peerd_unsolicited_responses_total",
			Help: "Connections to a next hop closed because it sent bytes past the end of its answer (never used to answer another request).",
		}, []string{"hop"}),
		clientBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "peerd_client_bytes_total",
			Help: "Bytes between peerd and its clients, by direction: received (request heads, bodies and tunnelled bytes from clients) and sent (everything clients got).",
		}, []string{"direction"}),
		byKey: make(map[requestKey]prometheus.Counter),
		files: newFileLimit(),
	}
	m.clientIn, m.clientOut = m.clientBytes.WithLabelValues("received"), m.clientBytes.WithLabelValues("sent")
	return m
}

// Register adds the collectors to r.
func (m *Metrics) Register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.retries, m.exhausted, m.hedges, m.hedgedRequests, m.hedgesRefused, m.refused, m.unsolicited, m.clientBytes, m.files.exhausted} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

type requestKey struct {
	status    int
	hierarchy string
}

// requestMemo is a connection's last request counter: its requests are
// mostly alike, so most skip the shared map (and its lock's cache line).
type requestMemo struct {
	key requestKey
	c   prometheus.Counter
}

func (m *Metrics) observeRequest(memo *requestMemo, status int, hierarchy string, d time.Duration) {
	k := requestKey{status, hierarchy}
	if memo.c != nil && memo.key == k {
		memo.c.Inc()
		m.duration.Observe(d.Seconds())
		return
	}
	m.mu.RLock()
	c := m.byKey[k]
	m.mu.RUnlock()
	if c == nil {
		c = m.requests.WithLabelValues(strconv.Itoa(status), hierarchy)
		m.mu.Lock()
		m.byKey[k] = c
		m.mu.Unlock()
	}
	memo.key, memo.c = k, c
	c.Inc()
	m.duration.Observe(d.Seconds())
}

func (m *Metrics) connRefused() { m.refused.Inc() }

func (m *Metrics) retry(reason string) { m.retries.WithLabelValues(reason).Inc() }

func (m *Metrics) budgetExhausted() { m.exhausted.Inc() }

func (m *Metrics) hedge() { m.hedges.Inc() }

func (m *Metrics) hedgeRequest() { m.hedgedRequests.Inc() }

func (m *Metrics) hedgeRefused() { m.hedgesRefused.Inc() }
