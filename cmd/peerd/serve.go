package main

// This file holds the server's life: opening the listeners (or taking them
// over from the binary being upgraded), waiting for first probe verdicts,
// serving, the signals (reload, log reopen, upgrade, stop) and the
// graceful shutdown.

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/peerd/peerd/cmd/peerd/internal/statefile"

	"github.com/sirupsen/logrus"

	"github.com/peerd/peerd/cmd/peerd/internal/handover"
	"github.com/peerd/peerd/internal/procs"
)

// serve runs until SIGTERM/SIGINT (or ctx ends), then shuts down
// gracefully; a second signal exits at once.
func (s *server) serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	cfg := s.cfg
	s.upg = handover.New(cfg.Proxy.PIDFile, s.log)
	s.upg.Current = s.sockets
	s.upg.State = s.operatorState
	if s.upg.Inherited() {
		s.log.Info("binary upgrade: started by the running peerd; taking its sockets over")
		s.takeHandedState()
	}
	s.warnStateNotKept()
	s.warnFewFiles()
	adminLn, err := s.upg.Listen("admin", cfg.Admin.Listen)
	if err != nil {
		return fmt.Errorf("admin listen: %w", err)
	}
	s.adminSrv = s.newAdminServer()
	s.startServing(s.adminSrv, adminLn, "admin")
	s.mu.Lock()
	s.adminLn = adminLn
	s.mu.Unlock()
	s.log.WithField("admin", adminLn.Addr().String()).Info("admin API listening")

	sw := &statefile.Writer{Reg: s.reg, Log: s.log, Path: func() string {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.cfg.Proxy.StateFile
	}}
	stateCtx, stopState := context.WithCancel(context.Background())
	stateDone := make(chan struct{})
	go func() { sw.Run(stateCtx); close(stateDone) }()
	handedOver := false
	defer func() {
		stopState()
		<-stateDone
		if !handedOver {
			sw.Write() // at stop; after a hand-over the new process owns the file
			s.warnOverridesLost()
		}
	}()

	probeCtx, stopProbes := context.WithCancel(context.Background())
	probesDone := make(chan struct{})
	go func() { s.prober.Run(probeCtx); close(probesDone) }()
	defer func() { stopProbes(); <-probesDone }()
	// peerd's own stalls, and the parents judged against each other.
	judged := make(chan struct{})
	go s.stalls.Run(probeCtx)
	go func() { s.judge(probeCtx); close(judged) }()
	defer func() { stopProbes(); <-judged }()

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
		if !s.upg.Inherited() {
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
	if s.upg.Inherited() {
		wait = min(wait, handover.Timeout/2) // the old process serves meanwhile, and waits at most 30 s
	}
	if wait > 0 {
		wctx, wcancel := context.WithTimeout(ctx, wait)
		if err := s.reg.WaitVerdicts(wctx); err != nil {
			s.log.WithField("waited", wait.String()).Warn("some peers have no probe verdict yet; opening the proxy port anyway")
		}
		wcancel()
	}
	proxyLn, err := s.upg.Listen("proxy", cfg.Proxy.Listen)
	if err != nil {
		s.adminSrv.Close()
		return fmt.Errorf("proxy listen: %w", err)
	}
	s.mu.Lock()
	s.proxyLn = proxyLn
	s.proxy.SetPort(listenPort(proxyLn))
	s.serveProxy(proxyLn)
	s.mu.Unlock()
	s.fleet.SetHTTPAddr(proxyLn.Addr().String()) // the members may ask it for keys it owns
	// Ready from the moment the port accepts: a client that connects
	// is served, so /readyz must not say otherwise.
	s.phase.Store(phaseServing)
	go s.watchNextHop(probeCtx)
	fields := logrus.Fields{"proxy": proxyLn.Addr().String(), "admin": adminLn.Addr().String(), "peers": len(s.reg.Peers()), "version": version, "pid": os.Getpid()}
	if cfg.Proxy.TLSListen != "" {
		ln, err := s.upg.Listen("tls", cfg.Proxy.TLSListen)
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
	s.upg.Ready()

	for {
		select {
		case <-ctx.Done():
			return s.shutdown(nil)
		case <-s.upg.Exit():
			s.handOverState()
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
				go s.upg.Upgrade()
			default:
				s.log.WithField("signal", sig.String()).Info("shutting down: no new connections, finishing in-flight requests")
				s.fleet.SetHTTPAddr("") // draining: the members stop choosing it as an owner
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
	close(s.retired)
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
	s.closeTrace()
	s.proxy.Cache().Close()
	s.wg.Wait()
	if s.access != nil {
		s.access.Close()
	}
	s.log.Info("peerd stopped")
	return nil
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

// judgeEvery is how often the parents are judged against each other.
const judgeEvery = 250 * time.Millisecond

// judge compares the parents' recent times (contract section 21) until
// ctx ends.
func (s *server) judge(ctx context.Context) {
	t := time.NewTicker(judgeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.reg.Judge(now)
		}
	}
}
