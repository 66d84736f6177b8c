package fleet

// This file holds the fleet as one cache (contract section 20): what a
// member tells the others in its memberlist meta (the address of its
// proxy port and its in-flight owner fetches), the owner of a cache key
// from that view (owner.go), the signature on member-to-member requests,
// a member suspected for ownership after it failed a request, and the
// counters of GET /fleet.

import (
	"crypto/ed25519"
	"encoding/json"
	"math"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/peerd/peerd/peers"
	"github.com/prometheus/client_golang/prometheus"
)

const (
	// ownerSuspectFor is how long a member that failed a request for a key
	// it owns is not asked again (its keys stay its own: the asking member
	// fetches them itself meanwhile).
	ownerSuspectFor = 10 * time.Second
	// memberConnectTimeout bounds a connect to a member's proxy port.
	memberConnectTimeout = time.Second
	// viewEvery is how often the owner view is rebuilt at most.
	viewEvery = 100 * time.Millisecond
)

// meta is what a member publishes beside its public key.
type meta struct {
	HTTP string `json:"h,omitempty"` // its proxy port, host:port
	Load int64  `json:"l,omitempty"` // owner fetches in flight
	// Leaving: the member is stopping on purpose (a stop, an upgrade's
	// old process, a reload that turns the fleet off): its leave is
	// news, not a failure.
	Leaving bool `json:"x,omitempty"`
}

// encodeMeta is the memberlist meta: the public key, then meta as JSON.
func encodeMeta(pub ed25519.PublicKey, m meta) []byte {
	b, _ := json.Marshal(m)
	return append(append([]byte(nil), pub...), b...)
}

// decodeMeta splits a member's meta.
func decodeMeta(b []byte) (ed25519.PublicKey, meta) {
	var m meta
	if len(b) < ed25519.PublicKeySize {
		return nil, m
	}
	if len(b) > ed25519.PublicKeySize {
		json.Unmarshal(b[ed25519.PublicKeySize:], &m)
	}
	return ed25519.PublicKey(b[:ed25519.PublicKeySize]), m
}

// shared is a Fleet's shared-cache state.
type shared struct {
	on       atomic.Bool
	maxLoad  atomic.Uint64 // float64 bits
	hot      atomic.Uint64 // float64 bits: hot_copies
	httpAddr atomic.Pointer[string]
	inFlight atomic.Int64 // owner fetches this member runs for others

	mu sync.Mutex
	// members are the others' meta as memberlist's events told it (read
	// there, under memberlist's lock: its nodes change in place).
	members  map[string]memberInfo
	view     *ownerView
	viewAt   time.Time
	suspects map[string]time.Time
	// keySuspects are single keys a member failed with an error of its
	// own (by node and key), fetched here until the time.
	keySuspects map[string]time.Time
	hops        map[string]*peers.Peer // by node and address
	// memberHops are the same hops, read lock-free by the accounting of
	// every outcome (accounting.go): which next hops are members.
	memberHops sync.Map // *peers.Peer → node name

	asked   [3]atomic.Int64 // as a non-owner: hit, miss, failed
	served  atomic.Int64    // as the owner: member requests answered
	fetched atomic.Int64    // as the owner: of those, fetched from a next hop
	hotKept atomic.Int64    // hot copies kept
}

// ownerView is the candidates for ownership and where to reach them.
type ownerView struct {
	cs   []Candidate
	addr map[string]string
}

// SetHTTPAddr tells the fleet the address of this member's proxy port
// (the listener's, once bound; [fleet] http_addr, when set, is published
// instead); "" withdraws it (draining: the others stop choosing this
// member as an owner).
func (f *Fleet) SetHTTPAddr(addr string) {
	f.shared.httpAddr.Store(&addr)
	if m := f.cur.Load(); m != nil && m.ml != nil {
		go m.updateNode(time.Second)
	}
}

// advertised is the proxy address this member publishes.
func (m *member) advertised() string {
	p := m.f.shared.httpAddr.Load()
	if p == nil || *p == "" {
		return "" // not serving yet, or draining: no owner
	}
	if m.cfg.HTTPAddr != "" {
		return m.cfg.HTTPAddr
	}
	host, port, err := net.SplitHostPort(*p)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		// Listening on every address: the others reach it at the
		// gossip host.
		if gh, _, err := net.SplitHostPort(m.cfg.Bind); err == nil {
			host = gh
		}
	}
	return net.JoinHostPort(host, port)
}

// SharedCache reports whether the fleet shares its caches now.
func (f *Fleet) SharedCache() bool { return f.cur.Load() != nil && f.shared.on.Load() }

// HotCopies is hot_copies: the share of objects fetched through their
// owner that a member keeps.
func (f *Fleet) HotCopies() float64 { return loadFloat(&f.shared.hot) }

// Owner is the owner of key: this member (self), another one with the
// next hop to ask it (hop nil while that member is suspected for
// ownership), or ok false when the fleet does not share its caches (off,
// or alone).
func (f *Fleet) Owner(key []byte) (node string, hop *peers.Peer, self, ok bool) {
	m := f.cur.Load()
	if m == nil || m.ml == nil || !f.shared.on.Load() {
		return "", nil, false, false
	}
	v := f.ownerView(m)
	if len(v.cs) < 2 {
		return "", nil, false, false
	}
	node = Owner(key, v.cs, loadFloat(&f.shared.maxLoad))
	if node == m.node {
		return node, nil, true, true
	}
	s := &f.shared
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if until, bad := s.suspects[node]; bad && now.Before(until) {
		return node, nil, false, true
	}
	if len(s.keySuspects) > 0 {
		if until, bad := s.keySuspects[keySuspect(node, KeyHash(key))]; bad && now.Before(until) {
			return node, nil, false, true
		}
	}
	return node, s.hopLocked(node, v.addr[node]), false, true
}

// hopLocked is the next hop of member node at addr (host:port), made
// once and known to the accounting as a member's (memberHops).
func (s *shared) hopLocked(node, addr string) *peers.Peer {
	hop := s.hops[node+"\x00"+addr]
	if hop == nil {
		host, ps, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(ps)
		hop = peers.NewMember(node, host, port, memberConnectTimeout)
		if s.hops == nil {
			s.hops = map[string]*peers.Peer{}
		}
		s.hops[node+"\x00"+addr] = hop
		s.memberHops.Store(hop, node)
	}
	return hop
}

// ownerView is the current candidates, rebuilt at most every viewEvery:
// the members memberlist holds alive that publish a proxy address.
func (f *Fleet) ownerView(m *member) *ownerView {
	s := &f.shared
	now := time.Now()
	s.mu.Lock()
	if s.view != nil && now.Sub(s.viewAt) < viewEvery {
		v := s.view
		s.mu.Unlock()
		return v
	}
	s.mu.Unlock()
	v := &ownerView{addr: map[string]string{}}
	add := func(node string, mt meta) {
		if mt.HTTP != "" {
			v.cs = append(v.cs, Candidate{Node: node, Weight: 1, Load: mt.Load})
			v.addr[node] = mt.HTTP
		}
	}
	add(m.node, meta{HTTP: m.advertised(), Load: s.inFlight.Load()})
	s.mu.Lock()
	for node, mi := range s.members {
		if node != m.node {
			add(node, mi.meta)
		}
	}
	s.view, s.viewAt = v, now
	s.mu.Unlock()
	return v
}

// memberInfo is a member as memberlist's events last showed it: a copy
// (memberlist rewrites its nodes in place, under its own lock, at every
// alive message).
type memberInfo struct {
	meta meta
	node memberlist.Node
}

// noteMember keeps a copy of a member (memberlist's join and update
// events, called under memberlist's lock).
func (s *shared) noteMember(n *memberlist.Node) {
	_, mt := decodeMeta(n.Meta)
	c := *n
	c.Meta = append([]byte(nil), n.Meta...)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.members == nil {
		s.members = map[string]memberInfo{}
	}
	s.members[n.Name] = memberInfo{meta: mt, node: c}
	s.view = nil
}

// others is a copy of every member but self, to send to.
func (s *shared) others(self string) []*memberlist.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*memberlist.Node, 0, len(s.members))
	for name, mi := range s.members {
		if name != self {
			n := mi.node
			out = append(out, &n)
		}
	}
	return out
}

// dropMember forgets a member memberlist saw leave or die: its keys move.
func (s *shared) dropMember(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.members, node)
	s.view = nil
}

// ownerFailed marks node suspected for ownership after it failed a
// request for a key it owns, for ownerSuspectFor, and counts the request
// as failed: for all its keys (it could not be reached, or broke its
// answer), or with one (an error answer of its own) for the key that
// about hashes alone, so that one URL that fails at its owner does not
// send the owner's other keys to the parents. The members that own it
// those keys fetch them themselves meanwhile (no client waits on it
// twice); its keys move only when memberlist declares it dead. A change
// is logged once.
func (f *Fleet) ownerFailed(node string, about uint32, one bool) {
	s := &f.shared
	s.asked[2].Add(1)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if one {
		if s.keySuspects == nil || len(s.keySuspects) >= maxKeySuspects {
			s.keySuspects = pruneUntil(s.keySuspects, now)
		}
		if len(s.keySuspects) < maxKeySuspects {
			s.keySuspects[keySuspect(node, about)] = now.Add(ownerSuspectFor)
		}
		return
	}
	if s.suspects == nil {
		s.suspects = map[string]time.Time{}
	}
	if until, was := s.suspects[node]; !was || !now.Before(until) {
		f.log.WithField("node", node).Warn("fleet: a member failed a request for a key it owns; its keys are fetched here for a while")
	}
	s.suspects[node] = now.Add(ownerSuspectFor)
}

// maxKeySuspects bounds the keys suspected at owners: past it, a key's
// failure is not remembered (its owner is asked again).
const maxKeySuspects = 4096

// pruneUntil is m without the entries that ended by now (a new map when
// m is nil).
func pruneUntil(m map[string]time.Time, now time.Time) map[string]time.Time {
	if m == nil {
		return map[string]time.Time{}
	}
	for k, until := range m {
		if !now.Before(until) {
			delete(m, k)
		}
	}
	return m
}

// OwnerAnswered counts a request its owner answered, by whether the
// owner had it (hit) or fetched it (miss); failures are counted by
// Accounting.
func (f *Fleet) OwnerAnswered(hit bool) {
	if hit {
		f.shared.asked[0].Add(1)
	} else {
		f.shared.asked[1].Add(1)
	}
}

// OwnerSkipped counts a request fetched here because its owner is
// suspected for ownership (as a failed request to it).
func (f *Fleet) OwnerSkipped() { f.shared.asked[2].Add(1) }

// Served counts a member request this member answered as the owner.
func (f *Fleet) Served() { f.shared.served.Add(1) }

// FetchBegin and FetchEnd bracket a fetch from a next hop this member
// makes as the owner, for another member: its load, published in the
// meta, is those in flight (collapsed requests and hits are no load).
func (f *Fleet) FetchBegin() { f.shared.inFlight.Add(1); f.shared.fetched.Add(1) }

func (f *Fleet) FetchEnd() { f.shared.inFlight.Add(-1) }

// HotCopyKept counts a hot copy kept.
func (f *Fleet) HotCopyKept() { f.shared.hotKept.Add(1) }

// OwnerCounts are the shared cache's counters for GET /fleet and the
// metrics.
type OwnerCounts struct {
	// Asked is this member's requests to owners by result (hit, miss,
	// failed).
	Asked map[string]int64 `json:"owner_requests"`
	// Served is member requests this member answered as the owner, and
	// Fetched those it fetched from a next hop.
	Served  int64 `json:"owner_served"`
	Fetched int64 `json:"owner_fetches"`
	Hot     int64 `json:"hot_copies"`
}

// OwnerCounts reads the counters.
func (f *Fleet) OwnerCounts() OwnerCounts {
	s := &f.shared
	return OwnerCounts{Asked: map[string]int64{"hit": s.asked[0].Load(), "miss": s.asked[1].Load(), "failed": s.asked[2].Load()},
		Served: s.served.Load(), Fetched: s.fetched.Load(), Hot: s.hotKept.Load()}
}

func loadFloat(a *atomic.Uint64) float64 { return math.Float64frombits(a.Load()) }

// metaLoop publishes this member's meta when its load changed, at most
// once a second, and every republishEvery in any case (an update is one
// gossiped message; one that was missed must not leave a member unknown
// as an owner until the next full state exchange), until it stops.
func (m *member) metaLoop() {
	defer m.done.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last, ticks := int64(-1), 0
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		ticks++
		if !m.f.shared.on.Load() {
			continue
		}
		if n := m.f.shared.inFlight.Load(); n != last || ticks%republishEvery == 0 {
			last = n
			m.updateNode(time.Second)
		}
	}
}

// republishEvery is how many seconds apart a member's meta is published
// at the least.
const republishEvery = 3

var descOwnerRequests = prometheus.NewDesc("peerd_fleet_owner_requests_total",
	"Requests this member asked of a key's owner in the fleet, by result: hit (the owner had it), miss (the owner fetched it), failed (fetched here instead).",
	[]string{"result"}, nil)

// OwnerRequests is peerd_fleet_owner_requests_total, for the metrics
// registry.
func (f *Fleet) OwnerRequests() prometheus.Collector { return ownerCollector{f} }

type ownerCollector struct{ f *Fleet }

func (c ownerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descOwnerRequests }

func (c ownerCollector) Collect(ch chan<- prometheus.Metric) {
	for i, r := range [...]string{"hit", "miss", "failed"} {
		ch <- prometheus.MustNewConstMetric(descOwnerRequests, prometheus.CounterValue, float64(c.f.shared.asked[i].Load()), r)
	}
}
