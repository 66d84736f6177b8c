package main

// This file holds the server: building every part from the config, serving,
// signals, shutdown and the cache's wiring.

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
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/peerd/peerd/admin"
	"github.com/peerd/peerd/auth"
	"github.com/peerd/peerd/cache"
	"github.com/peerd/peerd/dialer"
	"github.com/peerd/peerd/fleet"
	"github.com/peerd/peerd/forwarding"
	"github.com/peerd/peerd/icp"
	"github.com/peerd/peerd/internal/procs"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/probes"
	"github.com/peerd/peerd/selection"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/sirupsen/logrus"
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
	path  string
	log   *logrus.Logger
	phase atomic.Int32 // phaseStarting, phaseServing, phaseStopping: readiness
	// reloads is the last reload's result and time (the start counts as
	// one that succeeded): metrics and the status page.
	reloads reloadRecord
	started time.Time // when the process began (uptime)

	reg     *peers.Registry
	prober  *probes.Prober
	planner *selection.Planner
	proxy   *forwarding.Proxy
	fleet   *fleet.Fleet
	icpQ    *icp.Querier
	icpSrv  *icp.Server // guarded by mu; nil when [icp] listen is ""
	icpLog  atomic.Bool // [icp] log_queries
	// icpSources is [icp] allow (empty: [proxy] allow decides).
	icpSources atomic.Pointer[[]netip.Prefix]
	api        *admin.API

	mu        sync.Mutex // guards cfg, the listeners, the admin server and access
	cfg       *fileConfig
	proxyLn   net.Listener
	adminSrv  *http.Server
	access    *forwarding.AccessLog
	reloading sync.Mutex
	wg        sync.WaitGroup // serving goroutines
	upg       *upgrader      // socket hand-over to the next binary (upgrade.go)
	peerTLS   atomic.Pointer[peerTLS]
	clientTLS clientTLS    // the TLS listener's certificate
	tlsLn     net.Listener // guarded by mu; nil without tls_listen
	tlsRaw    net.Listener // the TCP listener under tlsLn (handed over on upgrade)
	adminLn   net.Listener // guarded by mu
}

// sockets are the listening sockets a binary upgrade hands over, by role.
func (s *server) sockets() map[string]fileConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]fileConn{}
	add := func(role string, v any) {
		if fc, ok := v.(fileConn); ok && v != nil {
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

// setAuth puts [auth] in force (a nil Basic: off).
func (s *server) setAuth(b *auth.Basic) {
	if b == nil {
		s.proxy.SetAuth(nil)
		return
	}
	s.proxy.SetAuth(b)
}

// tlsFor is the TLS client config of a peer (dialer.Dialer.TLS).
func (s *server) tlsFor(p *peers.Peer) *tls.Config { return (*s.peerTLS.Load())[p.Name()] }

func newServer(path string, cfg *fileConfig, stderr io.Writer) (*server, error) {
	lg := logrus.New()
	lg.SetOutput(stderr)
	configureLogger(lg, cfg.Log)
	s := &server{path: path, log: lg, cfg: cfg}
	for _, w := range cfg.warnings() {
		lg.Warn(w)
	}

	reg, err := peers.New(cfg.peerOptions(lg), cfg.Peers)
	if err != nil {
		return nil, err
	}
	s.reg = reg
	loadState(reg, cfg.Proxy.StateFile, lg)
	tlsConfs, err := buildPeerTLS(cfg.Peers)
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
	d := &dialer.Dialer{Reporter: reg, Log: lg, TLS: s.tlsFor, Source: source}
	s.prober = probes.New(probes.Options{Registry: reg, Dialer: d, Log: lg})
	s.planner = selection.New(reg, cfg.plannerOptions())

	promReg := prometheus.NewRegistry()
	promReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), admin.NewPeerCollector(reg))
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
		s.access.SetStripQuery(cfg.Log.StripQueryTerms)
		s.access.SetFormat(cfg.Log.format())
	}
	pol, err := cfg.policy()
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
		Config: cfg.Proxy, Planner: s.planner, Accounting: reg, Dialer: d,
		AccessLog: s.access, Metrics: metrics, Log: lg, Version: version, Policy: pol, ICP: icpQuerier,
		Source: source,
	})
	if err != nil {
		return nil, err
	}
	// A process started by a binary upgrade takes the disk store over
	// once the old one lets go; any other fails when another peerd
	// holds it.
	ch, err := cache.Open(cfg.Cache, cache.Options{Log: lg, TakeOver: os.Getenv(envReady) != ""})
	if err != nil {
		return nil, err
	}
	s.proxy.SetCache(ch)
	s.proxy.SetRules(cfg.rules())
	basic, err := auth.Load(cfg.Auth)
	if err != nil {
		return nil, err
	}
	s.setAuth(basic)
	promReg.MustRegister(s.proxy.CacheCollector())
	s.fleet = fleet.New(reg, lg)
	promReg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "peerd_fleet_members", Help: "Live members of the fleet, this peerd included; 0 when [fleet] is off.",
	}, func() float64 { return float64(s.fleet.Members()) }))
	s.api = admin.New(admin.Options{Registry: reg, Prober: s.prober, Reload: s.reload, Explain: s.explain,
		Gatherer: promReg, Log: lg, Cache: s.proxy.Cache, Fleet: s.fleet, Name: s.proxy.Name(), Version: version,
		Listen: cfg.Admin.Listen, Hosts: cfg.Admin.Hosts, Ready: s.readiness, Facts: s.facts}, cfg.Admin.Token)
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
			if p.ICPPort() != 0 && p.State() == peers.Alive && p.AdminState() == peers.Enabled {
				e.ICP = append(e.ICP, p.Name())
			}
		}
	}
	return e
}

func configureLogger(lg *logrus.Logger, c logConfig) {
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

// serve runs until SIGTERM/SIGINT (or ctx ends), then shuts down
// gracefully; a second signal exits at once.
func (s *server) serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	cfg := s.cfg
	s.upg = newUpgrader(cfg.Proxy.PIDFile, s.log)
	s.upg.current = s.sockets
	if s.upg.inherited() {
		s.log.Info("binary upgrade: started by the running peerd; taking its sockets over")
	}
	adminLn, err := s.upg.listen("admin", cfg.Admin.Listen)
	if err != nil {
		return fmt.Errorf("admin listen: %w", err)
	}
	s.adminSrv = s.newAdminServer()
	s.startServing(s.adminSrv, adminLn, "admin")
	s.mu.Lock()
	s.adminLn = adminLn
	s.mu.Unlock()
	s.log.WithField("admin", adminLn.Addr().String()).Info("admin API listening")

	sw := &stateWriter{reg: s.reg, log: s.log, path: func() string {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.cfg.Proxy.StateFile
	}}
	stateCtx, stopState := context.WithCancel(context.Background())
	stateDone := make(chan struct{})
	go func() { sw.run(stateCtx); close(stateDone) }()
	handedOver := false
	defer func() {
		stopState()
		<-stateDone
		if !handedOver {
			sw.write() // at stop; after a hand-over the new process owns the file
		}
	}()

	probeCtx, stopProbes := context.WithCancel(context.Background())
	probesDone := make(chan struct{})
	go func() { s.prober.Run(probeCtx); close(probesDone) }()
	defer func() { stopProbes(); <-probesDone }()

	if sz := procs.New(); sz != nil {
		sz.Changed = func(from, to int, busy float64) {
			s.log.WithFields(logrus.Fields{"from": from, "to": to, "busy_cores": fmt.Sprintf("%.2f", busy)}).Debug("worker threads follow the load")
		}
		sizeCtx, stopSizing := context.WithCancel(context.Background())
		sizeDone := make(chan struct{})
		go func() { sz.Run(sizeCtx); close(sizeDone) }()
		defer func() { stopSizing(); <-sizeDone }()
	}

	if err := s.fleet.Apply(cfg.Fleet, s.fleetNode(cfg)); err != nil {
		if !s.upg.inherited() {
			s.adminSrv.Close()
			return err
		}
		// The old process still holds the gossip port until it has
		// handed over: join once it lets go.
		go s.retryFleet(probeCtx, cfg)
	}
	if cfg.ICP.Listen != "" {
		srv, err := s.listenICP(cfg.ICP.Listen)
		if err != nil {
			s.adminSrv.Close()
			return err
		}
		s.mu.Lock()
		s.icpSrv = srv
		s.mu.Unlock()
	}
	fleetDone := make(chan struct{})
	go func() { s.fleet.Run(probeCtx); close(fleetDone) }()
	defer func() { stopProbes(); <-fleetDone; s.fleet.Close() }()

	// Open the proxy port once every peer has a first verdict (or the
	// longest probe timeout passed), so a restart is not a burst of 503s.
	wait := verdictWait(s.reg)
	if s.upg.inherited() {
		wait = min(wait, upgradeTimeout/2) // the old process serves meanwhile, and waits at most 30 s
	}
	if wait > 0 {
		wctx, wcancel := context.WithTimeout(ctx, wait)
		if err := s.reg.WaitVerdicts(wctx); err != nil {
			s.log.WithField("waited", wait.String()).Warn("some peers have no probe verdict yet; opening the proxy port anyway")
		}
		wcancel()
	}
	proxyLn, err := s.upg.listen("proxy", cfg.Proxy.Listen)
	if err != nil {
		s.adminSrv.Close()
		return fmt.Errorf("proxy listen: %w", err)
	}
	s.mu.Lock()
	s.proxyLn = proxyLn
	s.proxy.SetPort(listenPort(proxyLn))
	s.serveProxy(proxyLn)
	s.mu.Unlock()
	fields := logrus.Fields{"proxy": proxyLn.Addr().String(), "admin": adminLn.Addr().String(), "peers": len(s.reg.Peers()), "version": version, "pid": os.Getpid()}
	if cfg.Proxy.TLSListen != "" {
		ln, err := s.upg.listen("tls", cfg.Proxy.TLSListen)
		if err != nil {
			s.adminSrv.Close()
			return fmt.Errorf("proxy tls_listen: %w", err)
		}
		s.mu.Lock()
		s.tlsRaw = ln
		s.tlsLn = tls.NewListener(ln, s.clientTLS.config())
		s.serveProxy(s.tlsLn)
		s.mu.Unlock()
		fields["tls"] = ln.Addr().String()
	}
	s.log.WithFields(fields).Info("peerd serving")
	s.phase.Store(phaseServing)
	s.upg.ready()

	for {
		select {
		case <-ctx.Done():
			return s.shutdown(nil)
		case <-s.upg.exit():
			s.log.WithField("pid", os.Getpid()).Warn("handed over to the new process: no new connections here, finishing in-flight requests")
			s.proxy.Cache().Close() // the new process takes the disk store over
			handedOver = true
			stopState()
			return s.shutdown(sigs)
		case sig := <-sigs:
			switch sig {
			case syscall.SIGHUP:
				s.reload()
			case syscall.SIGUSR1:
				s.reopenAccessLog()
			case syscall.SIGUSR2:
				go s.upg.upgrade()
			default:
				s.log.WithField("signal", sig.String()).Info("shutting down: no new connections, finishing in-flight requests")
				return s.shutdown(sigs)
			}
		}
	}
}

// shutdown stops accepting, lets in-flight requests and tunnels finish up
// to shutdown_timeout, then closes what is left. A further SIGTERM/SIGINT
// on sigs ends it at once.
func (s *server) shutdown(sigs <-chan os.Signal) error {
	s.phase.Store(phaseStopping)
	s.mu.Lock()
	timeout := s.cfg.Proxy.ShutdownTimeout
	adminSrv := s.adminSrv
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	go func() {
		// Ends with the shutdown (ctx), whether or not a second signal
		// came; sigs may be nil (a shutdown not started by a signal).
		for {
			select {
			case sig, ok := <-sigs:
				if !ok {
					return
				}
				if sig == syscall.SIGTERM || sig == syscall.SIGINT {
					s.log.Warn("second signal: exiting now")
					cancel()
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		// Tell the fleet first: the others stop counting on this member.
		defer wg.Done()
		s.fleet.Close()
	}()
	go func() {
		defer wg.Done()
		s.proxy.Shutdown(ctx)
	}()
	go func() {
		defer wg.Done()
		s.proxy.WaitTunnels(ctx)
	}()
	wg.Wait()
	adminSrv.Close()
	s.mu.Lock()
	if s.icpSrv != nil {
		s.icpSrv.Close()
		s.icpSrv = nil
	}
	s.mu.Unlock()
	if s.icpQ != nil {
		s.icpQ.Close()
	}
	s.proxy.CloseIdle()
	s.proxy.Cache().Close()
	s.wg.Wait()
	if s.access != nil {
		s.access.Close()
	}
	s.log.Info("peerd stopped")
	return nil
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
	conn, err := s.upg.listenUDP("icp", addr)
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
func (s *server) retryFleet(ctx context.Context, cfg *fileConfig) {
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
func (s *server) fleetNode(cfg *fileConfig) string {
	switch {
	case cfg.Fleet.Node != "":
		return cfg.Fleet.Node
	case cfg.Proxy.Name != "":
		return cfg.Proxy.Name
	}
	_, port, _ := net.SplitHostPort(cfg.Fleet.Bind)
	return s.proxy.Name() + ":" + port
}

// reconfigureCache applies a reloaded [cache]: the stored objects stay
// unless the cache is turned off or its disk moved (then fresh, the new
// cache staged by the reload).
func (s *server) reconfigureCache(c cache.Config, fresh *cache.Cache) {
	cur := s.proxy.Cache()
	switch {
	case c.Memory <= 0:
		s.proxy.SetCache(nil)
		cur.Close()
	case fresh != nil:
		s.proxy.SetCache(fresh)
		cur.Close()
	default:
		cur.Reconfigure(c)
	}
}

// retire stops an old server after a listener move, letting its in-flight
// requests finish.
func (s *server) retire(srv *http.Server, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		srv.Close()
	}
}
