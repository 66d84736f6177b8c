// Package fleet is a fleet of peerds sharing what they learn about their
// peers, over hashicorp/memberlist (contract section 14).
//
// Each member gossips its verdicts about its peers: peer name, address,
// state and when the state changed. A member that hears another declare a
// peer dead marks its own peer of that name (or address) suspect at once:
// the peer sorts behind healthy ones, gets no new traffic while a healthy
// next hop exists, and the prober probes it now. The member's own probes
// and connects then decide: a peer it cannot reach dies by its own
// failures, one it can reach stays in use. So a death is learned once for
// the fleet, while a partition that cuts only one member off a parent is
// not spread by gossip. Revival is never taken from gossip, and nothing
// here changes a peer's dead or alive state.
//
// Verdicts are broadcast through memberlist's TransmitLimitedQueue and
// relayed once by every member that hears one first (so a verdict reaches
// every member within a few gossip rounds); a full state exchange
// (memberlist push/pull) on every join and every PushPullInterval is the
// backstop.
package fleet

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log"
	"math"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/peerd/peerd/peers"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// Fleet is this peerd's membership of a fleet. Its zero state (before
// Apply with a bind address, or after Close) is off: it gossips nothing,
// and Status says so.
type Fleet struct {
	reg *peers.Registry
	log logrus.FieldLogger
	// undecryptable counts the gossip datagrams this member dropped.
	undecryptable decryptFailures

	// cur is the running memberlist instance; nil when off.
	cur atomic.Pointer[member]
	// nonces are the member requests' nonces seen (membersig.go).
	nonces nonces

	// applyMu serialises Apply and Close (which call into memberlist).
	applyMu sync.Mutex
	// mu guards views, own and lastAt. No other lock is taken under it
	// (memberlist calls the delegates holding its own locks).
	mu sync.Mutex
	// views holds each other member's last verdict per peer, by node
	// then peer name; a member that leaves is dropped.
	views map[string]map[string]Verdict
	// own is what this member last published per peer.
	own map[string]Verdict
	// lastAt keeps this member's verdict times increasing even if the
	// wall clock steps back.
	lastAt int64
	// suspected is when a member's verdict last made a peer suspect, by
	// node and peer name (see receive).
	suspected map[string]time.Time
	// purges are the fleet's cache purges (purge.go).
	purges purges
	// shared is the shared cache's state (shared.go).
	shared shared
}

// New makes a Fleet over reg; it is off until Apply.
func New(reg *peers.Registry, log logrus.FieldLogger) *Fleet {
	return &Fleet{reg: reg, log: log.WithField("component", "fleet"),
		views: map[string]map[string]Verdict{}, own: map[string]Verdict{}, suspected: map[string]time.Time{},
		purges: purges{keep: DefaultConfig().PurgeLog, seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "peerd_fleet_purge_seconds",
			Help:    "Time from a purge made on this member to the last live member's acknowledgement.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		})}}
}

// PurgeSeconds is peerd_fleet_purge_seconds, for the metrics registry.
func (f *Fleet) PurgeSeconds() prometheus.Collector { return f.purges.seconds }

// member is one running memberlist instance: a reload that changes the
// bind address, key or node name replaces it.
type member struct {
	f     *Fleet
	cfg   Config
	node  string
	ml    *memberlist.Memberlist
	queue *memberlist.TransmitLimitedQueue
	stop  chan struct{}
	done  sync.WaitGroup
	// selfAddr and selfPort are this member's gossip address.
	selfAddr string
	selfPort int
	// joinMu guards cfg.Join, which a reload may change while the join
	// loop reads it.
	joinMu sync.Mutex
	// lastJoinErr is the last join failure logged; aloneSince is when
	// this member began failing to join (Unix ns, 0: it has company or
	// has not tried), and aloneLogged whether that was logged at error.
	lastJoinErr atomic.Pointer[string]
	aloneSince  atomic.Int64
	aloneLogged atomic.Bool
	// leaving: this member is closing (NodeMeta says so to the others).
	leaving atomic.Bool
	// updateMu serialises UpdateNode: memberlist's reads this member's
	// state without its lock, so two at once race (the race detector
	// caught a stop's announcement beside a serving port's).
	updateMu sync.Mutex
	// priv signs this member's messages; its public half is the node's
	// memberlist meta, so the others can tell who sent a verdict.
	priv ed25519.PrivateKey
	// keyOf returns another member's public key (nil: not a member);
	// nil means look it up in memberlist.
	keyOf func(node string) ed25519.PublicKey
	// addrsOf returns the addresses another member published (its
	// gossip and proxy addresses); nil means look them up in the
	// members memberlist told of.
	addrsOf func(node string) []netip.Addr
	// now is the clock verdict times are checked against (nil: time.Now).
	now func() time.Time
	// pins are the keys of the other members, pinned on first sight.
	pins pins
}

// Apply puts cfg in force, with node as this member's name. It is called
// at start and on every reload:
//   - off to on starts gossiping and joining;
//   - a changed bind address, key or node name replaces the memberlist
//     instance (a new bind address is opened before the old one is left,
//     so a failure keeps the running instance);
//   - a changed join list is joined in the background;
//   - on to off leaves the fleet.
//
// Peer state is never touched.
func (f *Fleet) Apply(cfg Config, node string) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	f.purges.mu.Lock()
	f.purges.keep = cfg.PurgeLog
	f.purges.mu.Unlock()
	f.shared.on.Store(cfg.SharedCache)
	f.shared.maxLoad.Store(math.Float64bits(cfg.MaxLoad))
	f.shared.hot.Store(math.Float64bits(float64(cfg.HotCopies)))
	old := f.cur.Load()
	switch {
	case !cfg.Enabled():
		if old != nil {
			f.cur.Store(nil)
			old.close()
			f.mu.Lock()
			f.views = map[string]map[string]Verdict{}
			f.mu.Unlock()
			f.log.Warn("fleet: left (bind is empty)")
		}
		return nil
	case old != nil && old.cfg.Bind == cfg.Bind && old.cfg.Key == cfg.Key && old.node == node:
		if !slices.Equal(old.cfg.Join, cfg.Join) {
			// Only the join list changed: join the new list from the
			// running instance.
			old.joinMu.Lock()
			old.cfg.Join = append([]string(nil), cfg.Join...)
			old.joinMu.Unlock()
			old.kickJoin()
		}
		return nil
	}
	if old != nil && (old.cfg.Bind == cfg.Bind || old.samePort(cfg.Bind)) {
		// Same address (or port), new key or name: the old instance
		// must let go of the port first.
		f.cur.Store(nil)
		old.close()
		m, err := f.start(cfg, node)
		if err != nil {
			// Put the old configuration back rather than leave the fleet.
			if m2, err2 := f.start(old.cfg, old.node); err2 == nil {
				f.cur.Store(m2)
			}
			return err
		}
		f.cur.Store(m)
		f.log.WithFields(logrus.Fields{"node": node, "bind": cfg.Bind}).Warn("fleet: restarted with the new key or node name")
		return nil
	}
	m, err := f.start(cfg, node)
	if err != nil {
		return err
	}
	f.cur.Store(m)
	if old != nil {
		old.close()
	}
	f.log.WithFields(logrus.Fields{"node": node, "bind": m.selfAddr, "join": strings.Join(cfg.Join, ","), "encrypted": cfg.Key != ""}).
		Info("fleet: gossiping")
	return nil
}

// start creates a memberlist instance for cfg; f.applyMu is held.
func (f *Fleet) start(cfg Config, node string) (*member, error) {
	host, port, _ := splitAddr(cfg.Bind) // validated
	ip, err := bindIP(host)
	if err != nil {
		return nil, fmt.Errorf("fleet.bind: %w", err)
	}
	var mc *memberlist.Config
	if ip.IsLoopback() {
		mc = memberlist.DefaultLocalConfig()
	} else {
		mc = memberlist.DefaultLANConfig()
	}
	m := &member{f: f, cfg: cfg, node: node, stop: make(chan struct{}), priv: newKey()}
	m.cfg.Join = append([]string(nil), cfg.Join...)
	mc.Name = node
	mc.BindAddr, mc.BindPort = ip.String(), port
	mc.AdvertisePort = port // memberlist sets both when port is 0
	if !ip.IsUnspecified() {
		mc.AdvertiseAddr = ip.String()
	}
	secret, _ := cfg.secret() // validated
	mc.SecretKey = secret
	mc.Delegate = (*delegate)(m)
	mc.Events = (*events)(m)
	mc.Conflict = (*events)(m)
	mc.Alive = (*aliveDelegate)(m)
	mc.Logger = log.New(logWriter{f.log, &f.undecryptable}, "", 0)
	m.queue = &memberlist.TransmitLimitedQueue{NumNodes: m.numNodes, RetransmitMult: mc.RetransmitMult}
	f.shared.mu.Lock()
	f.shared.members, f.shared.view = nil, nil // the new instance's events fill it again
	f.shared.mu.Unlock()
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("fleet: gossip on %s: %w", cfg.Bind, err)
	}
	m.ml = ml
	// memberlist rewrites its local node in place when the meta changes
	// (UpdateNode): its address and port are read once, here.
	ln := ml.LocalNode()
	m.selfAddr, m.selfPort = ln.Address(), int(ln.Port)
	// Everything this member knows goes out first (own verdicts only:
	// the others' are theirs to send).
	f.mu.Lock()
	own := make([]Verdict, 0, len(f.own))
	for _, v := range f.own {
		own = append(own, v)
	}
	f.mu.Unlock()
	for _, v := range own {
		m.queueVerdict(v)
	}
	m.done.Add(3)
	go m.joinLoop()
	go m.beatLoop()
	go m.metaLoop()
	return m, nil
}

func bindIP(host string) (net.IP, error) {
	if host == "" {
		return net.IPv4zero, nil
	}
	if host == "localhost" {
		return net.IPv4(127, 0, 0, 1), nil
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip, nil
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return nil, fmt.Errorf("cannot resolve %q: %v", host, err)
	}
	return ips[0], nil
}

// samePort reports whether bind asks for the port m is bound to (a new
// instance could not open it while m holds it).
func (m *member) samePort(bind string) bool {
	_, port, err := splitAddr(bind)
	return err == nil && port != 0 && port == m.selfPort
}

func (m *member) numNodes() int {
	if m.ml == nil {
		return 1
	}
	return m.ml.NumMembers()
}

// updateNode re-announces this member's meta, one at a time.
func (m *member) updateNode(timeout time.Duration) error {
	m.updateMu.Lock()
	defer m.updateMu.Unlock()
	return m.ml.UpdateNode(timeout)
}

// close leaves the fleet (telling the others, up to a second) and stops.
func (m *member) close() {
	close(m.stop)
	m.done.Wait()
	// Say it is a planned leave first, so the others log it as news.
	m.leaving.Store(true)
	if err := m.updateNode(500 * time.Millisecond); err != nil {
		m.f.log.WithError(err).Debug("fleet: announcing the leave")
	}
	if err := m.ml.Leave(time.Second); err != nil {
		m.f.log.WithError(err).Debug("fleet: leave")
	}
	m.ml.Shutdown()
}

// Close leaves the fleet.
func (f *Fleet) Close() {
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	if m := f.cur.Load(); m != nil {
		f.cur.Store(nil)
		m.close()
	}
}

// Members is the number of live members, this one included; 0 when off.
func (f *Fleet) Members() int {
	m := f.cur.Load()
	if m == nil {
		return 0
	}
	return m.ml.NumMembers()
}

// Run publishes this member's verdicts as the registry changes, until ctx
// ends: for the peers its change feed names (every peer after a reload).
func (f *Fleet) Run(ctx context.Context) {
	feed := f.reg.Subscribe()
	defer f.reg.Unsubscribe(feed)
	for {
		select {
		case <-ctx.Done():
			return
		case <-feed.C():
			changed, all := feed.Take()
			if all {
				changed = nil
			}
			f.publish(time.Now(), changed, all)
		}
	}
}

// publish queues a verdict for every peer of changed (every peer when
// all) whose state changed since the last one.
func (f *Fleet) publish(now time.Time, changed []*peers.Peer, all bool) {
	var out []Verdict
	defer func() {
		if m := f.cur.Load(); m != nil {
			for _, v := range out {
				m.queueVerdict(v)
				if v.State == StateDead {
					m.sendNow(v)
				}
			}
		}
	}()
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := make(map[string]bool, len(f.own))
	if all {
		changed = f.reg.Peers()
	}
	for _, p := range changed {
		name, st, cause := p.Name(), stateOf(p), p.Health().DeadCause()
		seen[name] = true
		if prev, ok := f.own[name]; ok && prev.State == st && prev.Addr == p.Addr() && prev.Cause == cause {
			continue
		}
		at := now.UnixNano()
		if at <= f.lastAt {
			at = f.lastAt + 1
		}
		f.lastAt = at
		v := Verdict{Node: "", Peer: name, Addr: p.Addr(), State: st, At: at, Cause: cause}
		f.own[name] = v
		out = append(out, v)
	}
	if all {
		for name := range f.own {
			if !seen[name] {
				delete(f.own, name) // removed by a reload
			}
		}
	}
}

// stateOf is a peer's state as the fleet tells it.
func stateOf(p *peers.Peer) string {
	if p.Health().State() == peers.Alive && p.Health().Suspect() {
		return StateSuspect
	}
	return p.Health().State().String()
}

// States a verdict can carry.
const (
	StateAlive   = "alive"
	StateDead    = "dead"
	StateSuspect = "suspect"
	StateUnknown = "unknown"
)
