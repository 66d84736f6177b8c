package main

// This file holds a reload (SIGHUP or POST /reload) as a transaction:
// the new file is read and validated whole, what it needs beyond the
// running config is staged (listeners, the access log, the policy), the
// fleet and the registry are moved over, and only then is it committed;
// any failure leaves the running config in force.

import (
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/peerd/peerd/access"
	"github.com/peerd/peerd/admin"
	"github.com/peerd/peerd/auth"
	"github.com/peerd/peerd/cache"
	"github.com/peerd/peerd/cmd/peerd/internal/config"
	"github.com/peerd/peerd/forwarding"
	"github.com/peerd/peerd/icp"
)

// reload re-reads the config file, as a transaction. Everything the new
// config needs that can fail (listeners on moved addresses, a new access
// log, the destination policy) is built first; only when all of it exists
// is it swapped in, and the old is retired, tracked. On any error what was
// opened is closed again and the running config is untouched. Peers
// keeping their name and address keep their state; in-flight requests on a
// moved listener finish.
func (s *server) reload() (admin.ReloadDiff, error) {
	d, err := s.reloadConfig()
	s.reloads.record(err == nil, time.Now())
	return d, err
}

// reloadConfig is reload, without the record of its result.
func (s *server) reloadConfig() (admin.ReloadDiff, error) {
	s.reloading.Lock()
	defer s.reloading.Unlock()
	cfg, ps := config.Load(s.path)
	if len(ps) > 0 {
		s.log.WithField("err", ps.Error()).Error("config reload refused; keeping the running config")
		return admin.ReloadDiff{}, ps
	}
	s.mu.Lock()
	old := s.cfg
	s.mu.Unlock()
	st, err := s.stage(cfg, old)
	if err != nil {
		s.log.WithError(err).Error("config reload refused; keeping the running config")
		return admin.ReloadDiff{}, err
	}
	if err := s.fleet.Apply(cfg.Fleet, s.fleetNode(cfg)); err != nil {
		// The fleet opens its new address before it leaves the old one:
		// on an error the running membership is unchanged.
		st.abort()
		s.log.WithError(err).Error("config reload refused; keeping the running config")
		return admin.ReloadDiff{}, err
	}
	// The peers' TLS configs go in with the peers (a new TLS peer must
	// never dial without one); a failed reconcile puts the old ones back.
	oldTLS := s.peerTLS.Swap(&st.peerTLS)
	if err := s.reg.Reconcile(cfg.PeerOptions(s.log), cfg.Peers); err != nil {
		s.peerTLS.Store(oldTLS)
		st.abort()
		if ferr := s.fleet.Apply(old.Fleet, s.fleetNode(old)); ferr != nil {
			s.log.WithError(ferr).Error("fleet: could not return to the running [fleet]")
		}
		s.log.WithError(err).Error("config reload refused; keeping the running config")
		return admin.ReloadDiff{}, err
	}
	s.commit(st, old)
	d := config.ReloadDiff(old, cfg)
	changed := make([]string, 0, len(d.Changed))
	for _, c := range d.Changed {
		changed = append(changed, c.Peer+"("+strings.Join(c.Fields, ",")+")")
	}
	s.log.WithFields(logrus.Fields{
		"peers": len(cfg.Peers), "path": displayPath(s.path),
		"kept": strings.Join(d.Kept, ","), "added": strings.Join(d.Added, ","), "removed": strings.Join(d.Removed, ","),
		"changed": strings.Join(changed, " "), "settings": strings.Join(d.Settings, ","),
	}).Info("config reloaded")
	return d, nil
}

// staged is what a reload built before anything was swapped.
type staged struct {
	cfg              *config.File
	proxyLn, adminLn net.Listener
	tlsRaw           net.Listener // under tlsLn
	access           *forwarding.AccessLog
	policy           *access.Policy
	icp              *icp.Server // a new ICP listener (moved or turned on)
	peerTLS          config.PeerTLS
	basic            *auth.Basic  // [auth] re-read (nil: off)
	clientCert       *clientTLS   // the TLS listener's certificate, re-read
	tlsLn            net.Listener // a TLS listener moved or turned on
	cache            *cache.Cache // a new cache (its disk moved, or it was off); nil: keep
}

// abort closes what staging opened.
func (st *staged) abort() {
	if st.proxyLn != nil {
		st.proxyLn.Close()
	}
	if st.adminLn != nil {
		st.adminLn.Close()
	}
	if st.tlsLn != nil {
		st.tlsLn.Close()
	}
	if st.access != nil {
		st.access.Close()
	}
	if st.icp != nil {
		st.icp.Close()
	}
	st.cache.Close()
}

// stage builds the resources cfg needs beyond old's; on an error it
// closes what it opened.
func (s *server) stage(cfg, old *config.File) (*staged, error) {
	st := &staged{cfg: cfg}
	fail := func(err error) (*staged, error) {
		st.abort()
		return nil, err
	}
	var err error
	if cfg.Proxy.Listen != old.Proxy.Listen {
		if st.proxyLn, err = s.upg.Listen("proxy", cfg.Proxy.Listen); err != nil {
			return fail(fmt.Errorf("proxy.listen: %w", err))
		}
	}
	if cfg.Admin.Listen != old.Admin.Listen {
		if st.adminLn, err = s.upg.Listen("admin", cfg.Admin.Listen); err != nil {
			return fail(fmt.Errorf("admin.listen: %w", err))
		}
	}
	if cfg.Log.AccessLog != "" && cfg.Log.AccessLog != old.Log.AccessLog {
		if st.access, err = forwarding.OpenAccessLog(cfg.Log.AccessLog); err != nil {
			return fail(fmt.Errorf("log.access_log: %w", err))
		}
	}
	if cfg.ICP.Listen != "" && cfg.ICP.Listen != old.ICP.Listen {
		if st.icp, err = s.listenICP(cfg.ICP.Listen); err != nil {
			return fail(err)
		}
	}
	if st.policy, err = cfg.Policy(); err != nil {
		return fail(err)
	}
	if cfg.Cache.Memory > 0 && (old.Cache.Memory <= 0 || cfg.Cache.Disk != old.Cache.Disk) {
		// A disk store moved or added: opened (and locked) before the
		// reload is agreed to; the running cache stays on an error.
		if st.cache, err = cache.Open(cfg.Cache, cache.Options{Log: s.log}); err != nil {
			return fail(fmt.Errorf("cache.disk: %w", err))
		}
	}
	if st.peerTLS, err = config.BuildPeerTLS(cfg.Peers); err != nil {
		return fail(err) // the running certificates stay
	}
	if st.basic, err = auth.Load(cfg.Auth); err != nil {
		return fail(err) // the running users stay
	}
	if cfg.Proxy.TLSListen != "" {
		st.clientCert = &clientTLS{}
		if err := st.clientCert.load(cfg.Proxy.TLSCert, cfg.Proxy.TLSKey); err != nil {
			return fail(err) // the running certificate stays
		}
		if cfg.Proxy.TLSListen != old.Proxy.TLSListen {
			ln, err := s.upg.Listen("tls", cfg.Proxy.TLSListen)
			if err != nil {
				return fail(fmt.Errorf("proxy.tls_listen: %w", err))
			}
			st.tlsRaw = ln
			st.tlsLn = tls.NewListener(ln, s.clientTLS.config())
		}
	}
	return st, nil
}

// commit swaps the staged config in. Nothing here can fail. Everything a
// request reads goes in as one generation: a request in flight keeps the
// one it began with.
func (s *server) commit(st *staged, old *config.File) {
	cfg := st.cfg
	configureLogger(s.log, cfg.Log)
	s.planner.SetOptions(cfg.PlannerOptions()) // taken by the generation below
	s.stalls.SetOn(cfg.Health.StallGuard)
	s.applyTrace(cfg.Trace)
	var basic forwarding.Authenticator
	if st.basic != nil {
		basic = st.basic
	}
	// The cache: a new one (its disk moved, or it was off), none, or the
	// same stores with this config's settings (a view of its own).
	prevCache := s.proxy.Cache()
	var nextCache *cache.Cache
	switch {
	case cfg.Cache.Memory <= 0:
	case st.cache != nil:
		nextCache = st.cache
	default:
		nextCache = prevCache.Reconfigured(cfg.Cache)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	prevLog := s.access
	if cfg.Log.AccessLog != old.Log.AccessLog {
		s.access = st.access
	}
	port := ""
	if st.proxyLn != nil && s.proxyLn != nil {
		port = listenPort(st.proxyLn)
	}
	ended := s.proxy.Reconfigure(forwarding.Generation{Config: cfg.Proxy, Policy: st.policy, Rules: cfg.CompiledRules(),
		Auth: basic, Cache: nextCache, AccessLog: s.access, LogFormat: cfg.Log.AccessFormat(),
		StripQueryTerms: cfg.Log.StripQueryTerms, Port: port})
	// What the old generations alone used goes once their last request
	// is done (they finish with what they hold).
	var closes []func()
	if prevCache != nil && (nextCache == nil || st.cache != nil) {
		closes = append(closes, prevCache.Close)
	}
	if prevLog != nil && prevLog != s.access {
		closes = append(closes, func() { prevLog.Close() })
	}
	s.closeWhenEnded(ended, closes)
	s.proxy.Prune(s.reg.Peers())
	s.api.SetToken(cfg.Admin.Token)
	s.api.SetHosts(cfg.Admin.Listen, cfg.Admin.Hosts)
	s.icpLog.Store(cfg.ICP.LogQueries)
	icpSources := cfg.ICP.Sources()
	s.icpSources.Store(&icpSources)
	if s.icpQ != nil {
		s.icpQ.SetTimeout(cfg.ICP.QueryTimeout)
		s.icpQ.SetDeadPeerTimeout(cfg.ICP.DeadPeerTimeout)
		if err := s.icpQ.SetSource(icpSource(cfg.ICP)); err != nil {
			s.log.WithError(err).Error("icp: queries keep going out from the old address")
		}
	}
	s.cfg = cfg
	if cfg.ICP.Listen != old.ICP.Listen {
		if s.icpSrv != nil {
			s.icpSrv.Close()
		}
		s.icpSrv = st.icp // nil when turned off
		if st.icp != nil {
			s.log.WithField("icp", st.icp.Addr().String()).Info("ICP listener moved")
		}
	}
	if st.proxyLn != nil && s.proxyLn != nil {
		// The old listener stops accepting; its connections finish their
		// requests as usual.
		prev := s.proxyLn
		s.proxyLn = st.proxyLn
		s.serveProxy(st.proxyLn)
		prev.Close()
		s.log.WithField("proxy", st.proxyLn.Addr().String()).Info("proxy listener moved")
	}
	if st.clientCert != nil {
		s.clientTLS.cert.Store(st.clientCert.cert.Load()) // new handshakes get it; open connections keep theirs
	}
	if st.tlsLn != nil || (cfg.Proxy.TLSListen == "" && s.tlsLn != nil) {
		prev := s.tlsLn
		s.tlsLn, s.tlsRaw = st.tlsLn, st.tlsRaw
		if st.tlsLn != nil {
			s.serveProxy(st.tlsLn)
		}
		if prev != nil {
			prev.Close()
		}
	}
	if st.adminLn != nil {
		prev := s.adminSrv
		s.adminSrv = s.newAdminServer()
		s.startServing(s.adminSrv, st.adminLn, "admin")
		s.adminLn = st.adminLn
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.retire(prev, cfg.Proxy.ShutdownTimeout)
		}()
		s.log.WithField("admin", st.adminLn.Addr().String()).Info("admin listener moved")
	}
}

// closeWhenEnded runs closes once no request holds a generation a reload
// replaced (ended), or once peerd has stopped serving (retired: its
// requests are done or were cut at shutdown_timeout).
func (s *server) closeWhenEnded(ended <-chan struct{}, closes []func()) {
	if len(closes) == 0 {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		select {
		case <-ended:
		case <-s.retired:
		}
		for _, c := range closes {
			c()
		}
	}()
}
