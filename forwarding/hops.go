package forwarding

// This file holds hops: what a walk takes from the proxy to reach its
// next hops — the accounting, the dialling, the idle pools, the retry and
// hedge budgets, the stall guard and the metrics — with the
// [health] settings of one config generation. Each generation has its
// own (gen.go), so a request walks under one generation's settings to
// its end; the walker, its attempts and the cache layer reach the
// process through it and never hold the Proxy.

import (
	"context"
	"net"
	"sync/atomic"

	"github.com/peerd/peerd/dialer"
	"github.com/peerd/peerd/internal/stall"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
	"github.com/peerd/peerd/tracing"
	"github.com/sirupsen/logrus"
	"golang.org/x/time/rate"
)

// hops is one generation's way to its next hops. Its pointers are the
// process's (one set of pools, budgets and counters for every
// generation); health and maxHeader are the generation's own.
type hops struct {
	acct    peers.Accounting
	dialer  PeerDialer
	origins originDialer
	pools   *pools
	budget  *retryBudget
	hedges  *hedgeBudget
	stalls  *stall.Guard // nil: off
	metrics *Metrics
	// health is the generation's [health] settings: first-byte timeouts,
	// hedging and its budget, connect timeouts.
	health *peers.Settings
	// maxHeader bounds a response head read past to reuse a connection.
	maxHeader int
	// unsolicitedLog spaces the warnings about next hops that send bytes
	// nobody asked for: a hostile parent must not flood the log.
	unsolicitedLog *rate.Sometimes
	log            logrus.FieldLogger
	// tracer exports traced requests' spans (nil inside: [trace] is off).
	tracer *atomic.Pointer[tracing.Exporter]
}

// originDialer connects to origins (DIRECT).
type originDialer struct {
	// dial, when set, replaces the source's dialer (tests).
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	source   *dialer.Source
	resolver Resolver
}

// unsolicited counts and logs n connections to hop closed because the
// hop sent bytes past its answer (a broken answer from that hop).
func (h *hops) unsolicited(hop selection.Hop, n int) {
	name := "DIRECT"
	if hop.Peer != nil {
		name = hop.Peer.Name()
	}
	if h.metrics != nil {
		h.metrics.unsolicited.WithLabelValues(name).Add(float64(n))
	}
	h.unsolicitedLog.Do(func() {
		h.log.WithField("peer", name).Warn("next hop sent bytes past the end of its answer; connection closed, not reused")
	})
}
