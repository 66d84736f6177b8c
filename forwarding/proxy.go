package forwarding

// This file holds the Proxy: its options and the interfaces it is wired
// with, the sets it keeps (users by address, open tunnels), New, and
// serving listeners, the janitor and Shutdown.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peerd/peerd/tracing"

	"github.com/peerd/peerd/access"
	"github.com/peerd/peerd/auth"
	"github.com/peerd/peerd/dialer"
	"github.com/peerd/peerd/internal/stall"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
	"github.com/sirupsen/logrus"
	"golang.org/x/time/rate"
)

// Planner gives the routes and peers in force, which a request plans
// with; *selection.Planner is one.
type Planner interface {
	Routing() selection.Routing
}

// Authenticator checks a request's Proxy-Authorization ([auth]);
// *auth.Basic is one.
type Authenticator interface {
	Check(header []byte, source string, now time.Time) (user string, v auth.Verdict)
	Realm() string
}

// PeerDialer connects to peers and reports outcomes; *dialer.Dialer is one.
type PeerDialer interface {
	DialPeer(ctx context.Context, p *peers.Peer, why dialer.Purpose, timeout time.Duration) (net.Conn, error)
}

// ICP asks peers by ICP (RFC 2186) before a GET or HEAD is planned;
// *icp.Querier is one.
type ICP interface {
	Query(ctx context.Context, url []byte) (first *peers.Peer, code string, asked, timedOut bool)
}

// Options wire a Proxy.
type Options struct {
	Config     Config
	Planner    Planner
	Accounting peers.Accounting
	Dialer     PeerDialer
	// DirectDial dials origins; nil means a net.Dialer.
	DirectDial func(ctx context.Context, network, addr string) (net.Conn, error)
	AccessLog  *AccessLog
	Metrics    *Metrics
	Log        logrus.FieldLogger
	Version    string
	// Policy is the destination policy ([access]); nil means the defaults
	// with no own addresses.
	Policy *access.Policy
	// Resolver resolves origin names for DIRECT; nil means
	// net.DefaultResolver.
	Resolver Resolver
	// ICP, when set, is asked before a GET or HEAD is planned.
	ICP ICP
	// Source, when set, is where [proxy] outgoing_address goes: the
	// local address of connections to origins (and to peers, through
	// the peer dialer that shares it).
	Source *dialer.Source
	// Stalls, when set, is peerd's stall guard (nil: off).
	Stalls *stall.Guard
	// Plans and Members, when set, make the members one cache
	// (fleet.go); the Accounting and the Dialer's reporter then account
	// for the members too (fleet.Accounting).
	Plans   PlanSource
	Members Members
}

// Resolver looks up an origin's addresses.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Proxy is the forward proxy: Serve it on one or more listeners.
type Proxy struct {
	planner Planner
	acct    peers.Accounting
	dialer  PeerDialer
	origins originDialer
	source  *dialer.Source
	icp     ICP
	metrics *Metrics
	log     logrus.FieldLogger
	version string

	// gen is the config generation in force (gen.go); genMu orders the
	// changes, and guards port, the plain listener's port as bound.
	gen   atomic.Pointer[generation]
	genMu sync.Mutex
	port  string

	instance string // random per process, for loop detection under the default name
	budget   *retryBudget
	hedges   hedgeBudget
	pools    *pools
	// stalls are peerd's own stalls (stall_guard): deadlines and the
	// hedge delay stretch by them, and head times exclude them.
	stalls  *stall.Guard
	plans   PlanSource
	members Members

	tunnels tunnelSet
	conns   connSet
	users   userAddrs
	// tracer exports traced requests' spans (nil: [trace] is off).
	tracer atomic.Pointer[tracing.Exporter]

	janitorOnce sync.Once
	// connFree holds clientConns parked connections gave back (park.go).
	connFree connPool
	stop     chan struct{} // closed by Shutdown
	// background are the revalidations running behind stale answers;
	// Shutdown waits for them as for requests in flight.
	background background

	// unsolicitedLog spaces the warnings about next hops that send bytes
	// nobody asked for: a hostile parent must not flood the log.
	unsolicitedLog rate.Sometimes
}

// OpenConnections is the client connections open now, tunnels included
// (what max_connections counts).
func (p *Proxy) OpenConnections() int64 { return p.conns.open.Load() }

// config is the [proxy] section of the generation in force.
func (p *Proxy) config() *runtimeConfig { return p.gen.Load().cfg }

// tunnelSet tracks open tunnels so shutdown can wait for them and, past
// shutdown_timeout, close them.
type tunnelSet struct {
	mu   sync.Mutex
	open map[*tunnelRun]struct{}
	zero chan struct{} // closed when none is left open; nil when nobody waits
}

// userAddrs remembers the addresses each proven user was seen from
// within userAddrTTL (Squid's authenticate_ip_ttl default), for the
// rules' max_user_ip.
type userAddrs struct {
	mu sync.Mutex
	m  map[string]map[netip.Addr]time.Time
}

// HedgesBudgetLeft is how many hedges hedge_budget allows now (GET
// /peers hedges_budget_left).
func (p *Proxy) HedgesBudgetLeft() int64 {
	return p.hedges.left(p.gen.Load().hops.health.HedgeBudget(), time.Now())
}

// New returns a proxy.
func New(o Options) (*Proxy, error) {
	p := &Proxy{
		planner: o.Planner, acct: o.Accounting, dialer: o.Dialer, source: o.Source, stalls: o.Stalls, plans: o.Plans, members: o.Members,
		metrics: o.Metrics, log: o.Log, version: o.Version, icp: o.ICP,
		origins:        originDialer{dial: o.DirectDial, source: o.Source, resolver: o.Resolver},
		budget:         newRetryBudget(o.Config.RetryBudget),
		pools:          newPools(),
		stop:           make(chan struct{}),
		unsolicitedLog: rate.Sometimes{Interval: 10 * time.Second},
		instance:       fmt.Sprintf("%08x", rand.Uint32()),
	}
	if o.Policy == nil {
		pol, err := access.Compile(access.DefaultConfig(), nil)
		if err != nil {
			return nil, err
		}
		o.Policy = pol
	}
	if p.origins.resolver == nil {
		p.origins.resolver = net.DefaultResolver
	}
	p.background.serve = p.serveInternal
	if p.log == nil {
		p.log = logrus.StandardLogger()
	}
	if p.version == "" {
		p.version = "dev"
	}
	if p.metrics == nil {
		p.metrics = NewMetrics()
	}
	p.conns.init()
	if err := o.Config.Validate(); err != nil {
		return nil, err
	}
	p.store(&generation{cfg: p.runtime(o.Config), policy: o.Policy, log: logOf(o.AccessLog, nil, true), conns: &p.conns})
	return p, nil
}

// Prune drops the pools of peers no longer configured.
func (p *Proxy) Prune(current []*peers.Peer) {
	keep := make(map[*peers.Peer]bool, len(current))
	for _, c := range current {
		keep[c] = true
	}
	p.pools.expire(time.Now(), p.config().PconnTimeout, keep)
}

// CloseIdle closes every idle pooled connection.
func (p *Proxy) CloseIdle() { p.pools.expire(time.Now(), 0, nil) }

// janitor closes pooled connections idle past pconn_timeout, so an idle
// hop is not held open forever.
func (p *Proxy) janitor() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			p.pools.expire(now, p.config().PconnTimeout, nil)
			p.conns.returnIdleMemory(now, p.Tunnels())
		}
	}
}

// Serve accepts client connections on ln until ln is closed or Shutdown
// is called. Several listeners may be served at once (a listener moved by
// a reload keeps its connections while the new one accepts).
func (p *Proxy) Serve(ln net.Listener) error {
	p.janitorOnce.Do(func() { go p.janitor() })
	if !p.conns.addListener(ln) {
		ln.Close()
		return nil
	}
	defer p.conns.removeListener(ln)
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || p.conns.closing() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || outOfFiles(err) {
				// Out of file descriptors or similar: wait, as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				if outOfFiles(err) {
					p.metrics.files.hit("accept", err, p.log)
				} else {
					p.log.WithError(err).Warn("proxy accept failed; retrying")
				}
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		p.accept(nc)
	}
}

// Shutdown stops accepting, closes idle client connections, and waits for
// requests in flight to finish; when ctx ends first it closes the rest.
// Tunnels are waited for by WaitTunnels.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.conns.beginClose(p.config().ShutdownIdleGrace)
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	bg := p.background.tasks.close()
	for {
		if p.conns.closeIdle(time.Now()) == 0 {
			select {
			case <-bg:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				continue
			}
		}
		select {
		case <-ctx.Done():
			p.conns.closeAll()
			return ctx.Err()
		case <-t.C:
		}
	}
}
