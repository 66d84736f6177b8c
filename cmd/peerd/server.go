package main

// This file holds the server: building every part from the config, and
// the wiring of its access log, ICP, fleet and cache.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/sirupsen/logrus"

	"github.com/peerd/peerd/admin"
	"github.com/peerd/peerd/auth"
	"github.com/peerd/peerd/cache"
	"github.com/peerd/peerd/cmd/peerd/internal/config"
	"github.com/peerd/peerd/cmd/peerd/internal/handover"
	"github.com/peerd/peerd/cmd/peerd/internal/statefile"
	"github.com/peerd/peerd/dialer"
	"github.com/peerd/peerd/fleet"
	"github.com/peerd/peerd/forwarding"
	"github.com/peerd/peerd/icp"
	"github.com/peerd/peerd/internal/stall"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/probes"
	"github.com/peerd/peerd/selection"
	"github.com/peerd/peerd/tracing"
)

// debugLogger adapts l to a *log.Logger writing at debug level, for
// net/http's ErrorLog field (logrus's WriterLevel needs a goroutine and a
// pipe; this needs neither).
func debugLogger(l logrus.FieldLogger) *log.Logger { return log.New(debugWriter{l}, "", 0) }

type debugWriter struct{ l logrus.FieldLogger }

func (w debugWriter) Write(b []byte) (int, error) {
	w.l.Debug(strings.TrimSpace(string(b)))
	return len(b), nil
}

// server wires the packages together and owns listeners and signals.
type server struct {
	path string
	log  *logrus.Logger
	// tracer is the span exporter in force (nil: [trace] off); changed
	// only under reloading.
	tracer *tracing.Exporter
	// traceDrops counts the spans every exporter dropped.
	traceDrops tracing.Drops
	phase      atomic.Int32 // phaseStarting, phaseServing, phaseStopping: readiness
	// reloads is the last reload's result and time (the start counts as
	// one that succeeded): metrics and the status page.
	reloads reloadRecord
	started time.Time // when the process began (uptime)
	// retired is closed once peerd serves no more requests (shutdown):
	// what a reload replaced is closed then if no earlier
	// (closeWhenEnded).
	retired chan struct{}

	reg     *peers.Registry
	prober  *probes.Prober
	planner *selection.Planner
	stalls  *stall.Guard // peerd's own stalls (stall_guard)
	proxy   *forwarding.Proxy
	fleet   *fleet.Fleet
	icpQ    *icp.Querier
	icpSrv  *icp.Server // guarded by mu; nil when [icp] listen is ""
	icpLog  atomic.Bool // [icp] log_queries
	// icpSources is [icp] allow (empty: [proxy] allow decides).
	icpSources atomic.Pointer[[]netip.Prefix]
	api        *admin.API

	mu        sync.Mutex // guards cfg, the listeners, the admin server and access
	cfg       *config.File
	proxyLn   net.Listener
	adminSrv  *http.Server
	access    *forwarding.AccessLog
	reloading sync.Mutex
	wg        sync.WaitGroup     // serving goroutines
	upg       *handover.Upgrader // socket hand-over to the next binary (cmd/peerd/internal/handover)
	peerTLS   atomic.Pointer[config.PeerTLS]
	clientTLS clientTLS    // the TLS listener's certificate
	tlsLn     net.Listener // guarded by mu; nil without tls_listen
	tlsRaw    net.Listener // the TCP listener under tlsLn (handed over on upgrade)
	adminLn   net.Listener // guarded by mu
}

// sockets are the listening sockets a binary upgrade hands over, by role.
func (s *server) sockets() map[string]handover.FileConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]handover.FileConn{}
	add := func(role string, v any) {
		if fc, ok := v.(handover.FileConn); ok && v != nil {
			out[role] = fc
		}
	}
	add("proxy", s.proxyLn)
	add("admin", s.adminLn)
	add("tls", s.tlsRaw)
	if s.icpSrv != nil {
		add("icp", s.icpSrv.Conn())
	}
	return out
}

// tlsFor is the TLS client config of a peer (dialer.Dialer.TLS).
func (s *server) tlsFor(p *peers.Peer) *tls.Config { return (*s.peerTLS.Load())[p.Name()] }

func newServer(path string, cfg *config.File, stderr io.Writer) (*server, error) {
	lg := logrus.New()
	lg.SetOutput(stderr)
	configureLogger(lg, cfg.Log)
	s := &server{path: path, log: lg, cfg: cfg, retired: make(chan struct{})}
	for _, w := range cfg.Warnings() {
		lg.Warn(w)
	}

	reg, err := peers.New(cfg.PeerOptions(lg), cfg.Peers)
	if err != nil {
		return nil, err
	}
	s.reg = reg
	statefile.Load(reg, cfg.Proxy.StateFile, lg)
	tlsConfs, err := config.BuildPeerTLS(cfg.Peers)
	if err != nil {
		return nil, err
	}
	if cfg.Proxy.TLSListen != "" {
		if err := s.clientTLS.load(cfg.Proxy.TLSCert, cfg.Proxy.TLSKey); err != nil {
			return nil, err
		}
	}
	s.peerTLS.Store(&tlsConfs)
	source := new(dialer.Source) // [proxy] outgoing_address, set by the proxy's config
	s.stalls = stall.New(nil)
	s.stalls.SetOn(cfg.Health.StallGuard)
	// The fleet's members are accounted beside the registry's peers: an
	// owner's failed connect or answer makes it suspect (fleet.Accounting).
	s.fleet = fleet.New(reg, lg)
	acct := s.fleet.Accounting(reg)
	d := &dialer.Dialer{Reporter: acct, Log: lg, TLS: s.tlsFor, Source: source, Stalls: s.stalls}
	s.prober = probes.New(probes.Options{Registry: reg, Dialer: d, Log: lg, Stalls: s.stalls})
	s.planner = selection.New(reg, cfg.PlannerOptions())

	promReg := prometheus.NewRegistry()
	// The Go collector's defaults, and GC pauses as runtime/metrics has
	// them (go_gc_pauses_seconds: a histogram, where the default summary
	// keeps only quantiles of the last few).
	gc := collectors.WithGoCollectorRuntimeMetrics(collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/pauses:seconds$`)})
	promReg.MustRegister(collectors.NewGoCollector(gc), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), admin.NewPeerCollector(reg))
	timings := admin.NewPeerTimings()
	promReg.MustRegister(timings.Collectors()...)
	reg.SetTimings(timings)
	s.started = time.Now()
	s.reloads.record(true, s.started)
	s.registerServerMetrics(promReg)
	metrics := forwarding.NewMetrics()
	if err := metrics.Register(promReg); err != nil {
		return nil, err
	}
	if cfg.Log.AccessLog != "" {
		if s.access, err = forwarding.OpenAccessLog(cfg.Log.AccessLog); err != nil {
			return nil, err
		}
	}
	pol, err := cfg.Policy()
	if err != nil {
		return nil, err
	}
	var icpQuerier forwarding.ICP
	s.icpLog.Store(cfg.ICP.LogQueries)
	icpSources := cfg.ICP.Sources()
	s.icpSources.Store(&icpSources)
	if s.icpQ, err = icp.NewQuerier(reg, lg, cfg.ICP.QueryTimeout, icpSource(cfg.ICP)); err != nil {
		lg.WithError(err).Error("icp: cannot open a socket for queries; peers will not be asked by ICP")
	} else {
		s.icpQ.SetDeadPeerTimeout(cfg.ICP.DeadPeerTimeout)
		icpQuerier = s.icpQ
	}
	s.proxy, err = forwarding.New(forwarding.Options{
		Config: cfg.Proxy, Planner: s.planner, Accounting: acct, Dialer: d,
		AccessLog: s.access, Metrics: metrics, Log: lg, Version: version, Policy: pol, ICP: icpQuerier,
		Source: source, Stalls: s.stalls, Plans: s.fleet, Members: s.fleet,
	})
	if err != nil {
		return nil, err
	}
	s.applyTrace(cfg.Trace)
	// A process started by a binary upgrade takes the disk store over
	// once the old one lets go; any other fails when another peerd
	// holds it.
	ch, err := cache.Open(cfg.Cache, cache.Options{Log: lg, TakeOver: handover.Started()})
	if err != nil {
		return nil, err
	}
	basic, err := auth.Load(cfg.Auth)
	if err != nil {
		return nil, err
	}
	var a forwarding.Authenticator
	if basic != nil {
		a = basic
	}
	s.proxy.Reconfigure(forwarding.Generation{Config: cfg.Proxy, Policy: pol, Rules: cfg.CompiledRules(), Auth: a, Cache: ch,
		AccessLog: s.access, LogFormat: cfg.Log.AccessFormat(), StripQueryTerms: cfg.Log.StripQueryTerms})
	promReg.MustRegister(s.proxy.CacheCollector())
	s.fleet.SetPurger(func(key []byte) int {
		if c := s.proxy.Cache(); c != nil {
			return c.Purge(key)
		}
		return 0
	})
	promReg.MustRegister(s.fleet.PurgeSeconds(), s.fleet.OwnerRequests())
	promReg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "peerd_fleet_members", Help: "Live members of the fleet, this peerd included; 0 when [fleet] is off.",
	}, func() float64 { return float64(s.fleet.Members()) }))
	promReg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "peerd_ready", Help: "1 while a request for the default route has a usable next hop (GET /readyz is 200), else 0.",
	}, func() float64 {
		if ok, _ := s.readiness(); ok {
			return 1
		}
		return 0
	}))
	s.api = admin.New(admin.Options{Registry: reg, Prober: s.prober, Reload: s.reload, Explain: s.explain,
		Gatherer: promReg, Log: lg, Cache: s.proxy.Cache, Fleet: s.fleet, Name: s.proxy.Name(), Version: version,
		Listen: cfg.Admin.Listen, Hosts: cfg.Admin.Hosts, Ready: s.readiness, Facts: s.facts, HedgesLeft: s.proxy.HedgesBudgetLeft}, cfg.Admin.Token)
	return s, nil
}

// explain is GET /plan: the proxy's refusal when it would refuse the
// request before planning, else the plan with the peers ICP would ask.
func (s *server) explain(r selection.Request) selection.Explanation {
	d, rule := s.proxy.Refusal(r.Method, r.URL, r.ClientIP, r.User)
	var rp *int
	if rule >= 0 {
		rp = &rule
	}
	if d != "" {
		return selection.Explanation{Hops: []selection.ExplainedHop{}, Skipped: []selection.SkippedPeer{}, Denied: d, Rule: rp}
	}
	e := s.planner.Explain(r)
	e.Rule = rp
	if s.icpQ != nil && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		for _, p := range s.reg.Peers() {
			if p.ICPPort() != 0 && p.Health().State() == peers.Alive && p.Health().AdminState() == peers.Enabled {
				e.ICP = append(e.ICP, p.Name())
			}
		}
	}
	return e
}

func configureLogger(lg *logrus.Logger, c config.LogConfig) {
	lg.SetLevel(logrus.Level(c.Level))
	if c.Format == "json" {
		lg.SetFormatter(&logrus.JSONFormatter{})
	} else {
		lg.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, DisableColors: true})
	}
}

func (s *server) newAdminServer() *http.Server {
	return &http.Server{
		Handler:           s.api,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second, // bodies are at most 1 MiB
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          debugLogger(s.log.WithField("component", "admin")),
	}
}

// listenPort is the port ln is bound to.
func listenPort(ln net.Listener) string {
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// serveProxy runs the proxy engine on ln.
func (s *server) serveProxy(ln net.Listener) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.proxy.Serve(ln); err != nil {
			s.log.WithError(err).Error("proxy server stopped")
		}
	}()
}

func (s *server) startServing(srv *http.Server, ln net.Listener, what string) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.WithError(err).Errorf("%s server stopped", what)
		}
	}()
}

func (s *server) reopenAccessLog() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.access == nil {
		return
	}
	if err := s.access.Reopen(); err != nil {
		s.log.WithError(err).Error("access log reopen failed")
		return
	}
	s.log.WithField("path", s.access.Path()).Info("access log reopened")
}

// icpSource is the address ICP queries go out from: the [icp] listen
// address's IP, as Squid sends from its ICP port ("" for any).
func icpSource(c icp.Config) string {
	if h, _, err := net.SplitHostPort(c.Listen); err == nil && net.ParseIP(h) != nil {
		return h
	}
	return ""
}

// icpAllowed is the ICP source check: [icp] allow when set, else
// [proxy] allow.
func (s *server) icpAllowed(a netip.Addr) bool {
	if ps := s.icpSources.Load(); ps != nil && len(*ps) > 0 {
		for _, p := range *ps {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return s.proxy.Allowed(a)
}

// listenICP opens an ICP listener answering from the proxy's cache.
func (s *server) listenICP(addr string) (*icp.Server, error) {
	conn, err := s.upg.ListenUDP("icp", addr)
	if err != nil {
		return nil, fmt.Errorf("icp.listen: %w", err)
	}
	srv := icp.Serve(conn, icp.ServerOptions{
		Store: s.proxy, Registry: s.reg, Allowed: s.icpAllowed, DirectAllowed: s.planner.DirectAllowed, Log: s.log,
		Answered: func(from netip.Addr, result string, size int, url []byte) {
			if s.icpLog.Load() {
				s.proxy.LogICP(from, result, size, url)
			}
		},
	})
	s.log.WithField("icp", srv.Addr().String()).Info("answering ICP queries")
	return srv, nil
}

// retryFleet joins the fleet once the old process (in a binary upgrade)
// lets go of the gossip port, for up to a minute.
func (s *server) retryFleet(ctx context.Context, cfg *config.File) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.fleet.Apply(cfg.Fleet, s.fleetNode(cfg)); err == nil {
			return
		}
	}
	s.log.Error("fleet: the gossip port stayed busy after the upgrade; reload to retry")
}

// fleetNode is the fleet member name cfg gives: [fleet] node, else the
// [proxy] name, else (both defaulted) the host name with the gossip port,
// so that several peerds on one host are distinct members.
func (s *server) fleetNode(cfg *config.File) string {
	switch {
	case cfg.Fleet.Node != "":
		return cfg.Fleet.Node
	case cfg.Proxy.Name != "":
		return cfg.Proxy.Name
	}
	_, port, _ := net.SplitHostPort(cfg.Fleet.Bind)
	return s.proxy.Name() + ":" + port
}
