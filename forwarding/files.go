package forwarding

// This file holds running out of file descriptors: an accept or a
// connect that fails for want of one (EMFILE, ENFILE) is peerd's own
// limit, never a client's or a next hop's fault. It is counted
// (peerd_descriptors_exhausted_total{where}), logged at most once a
// minute with what to do, and /readyz says peerd is not ready while it
// lasts, so that a load balancer sends clients elsewhere.

import (
	"errors"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"golang.org/x/time/rate"
)

// fileLimit is the proxy's record of running out of descriptors.
type fileLimit struct {
	exhausted *prometheus.CounterVec // by where: accept, connect
	last      atomic.Int64           // Unix ns of the last failure
	log       rate.Sometimes
}

func newFileLimit() *fileLimit {
	return &fileLimit{
		exhausted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "peerd_descriptors_exhausted_total",
			Help: "Accepts and connects that failed because peerd had no file descriptor left (EMFILE, ENFILE): raise LimitNOFILE, or lower max_connections.",
		}, []string{"where"}),
		log: rate.Sometimes{Interval: time.Minute},
	}
}

// outOfFiles reports whether err is a want of file descriptors.
func outOfFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// hit records one failure for want of a descriptor at where.
func (f *fileLimit) hit(where string, err error, log logrus.FieldLogger) {
	f.exhausted.WithLabelValues(where).Inc()
	f.last.Store(time.Now().UnixNano())
	f.log.Do(func() {
		var lim syscall.Rlimit
		syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
		log.WithFields(logrus.Fields{"where": where, "err": err.Error(), "limit": lim.Cur}).
			Warn("out of file descriptors: connections are refused or fail until some close; raise LimitNOFILE (or ulimit -n), or lower max_connections (counted in peerd_descriptors_exhausted_total, logged once a minute)")
	})
}

// OutOfFilesSince is when peerd last ran out of file descriptors (zero:
// never), for /readyz.
func (p *Proxy) OutOfFilesSince() time.Time {
	if ns := p.metrics.files.last.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}
