package forwarding

// This file holds the config generation: everything a reload changes that
// a request reads ([proxy] with its words parsed, the destination policy,
// [[rule]], [auth], the planner's routes and peers, the cache with its
// settings, the access log with its format, the [health] settings a walk
// reads, the revalidations in the background), built whole and put in
// force with one atomic store. A request takes the generation once, when
// its head has been read, and is served under it to its end: a reload
// while it is in flight changes nothing it sees. A generation a newer one
// replaced ends when its last request is done, and tells whoever replaced
// it (Reconfigure), who closes then what only it used.

import (
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/peerd/peerd/access"
	"github.com/peerd/peerd/cache"
	"github.com/peerd/peerd/selection"
)

// generation is one config in force. It is never changed once stored:
// each change builds a new one.
type generation struct {
	cfg     *runtimeConfig
	policy  *access.Policy
	rules   []Rule
	auth    Authenticator    // nil: [auth] is off
	members Members          // the fleet's member requests' authenticator; nil: in no fleet
	routing selection.Router // the planner's routes and peers, led by the fleet's owners in a fleet
	cache   *cache.Cache     // nil: the cache is off; its settings are this generation's
	log     *logView         // nil: no access log
	// keepQuery: strip_query_terms is off (URLs in spans keep queries).
	keepQuery bool
	// conns and users are the proxy's own, for the rules' max_conn and
	// max_user_ip; users is nil unless a rule has max_user_ip (no
	// authenticated request pays for keeping them otherwise).
	conns *connSet
	users *userAddrs
	// hops is the way to next hops under this generation, with the
	// [health] settings as it was made (hops.go): a request reads its
	// first-byte timeouts, hedge budget and connect timeouts there, not
	// live.
	hops hops
	// bg runs revalidations behind stale answers (the proxy's own).
	bg *background
	// life is how long the generation lasts (acquire, release).
	life *genLife
}

// genLife is a generation's life: the requests it serves (refs), and
// whether a newer one is in force (retired). Once retired with no
// request left it is idle; it has ended once it is idle and the
// generation before it has ended, so that ended says no request holds
// this generation or an older one.
type genLife struct {
	refs    atomic.Int64
	retired atomic.Bool
	once    sync.Once
	idle    chan struct{}
	prev    <-chan struct{} // the previous generation's ended; nil: none
	ended   chan struct{}
}

func newLife(prev *generation) *genLife {
	l := &genLife{idle: make(chan struct{}), ended: make(chan struct{})}
	if prev != nil {
		l.prev = prev.life.ended
	}
	return l
}

// acquire takes the generation in force for a request, which releases it
// when it is done: a generation is never taken after it was retired
// (one found retired between the load and the count is let go and the
// new one taken).
func (p *Proxy) acquire() *generation {
	for {
		g := p.gen.Load()
		g.life.refs.Add(1)
		if p.gen.Load() == g {
			return g
		}
		g.release()
	}
}

// release ends a request's hold on g; the last of a retired generation
// makes it idle.
func (g *generation) release() {
	if g.life.refs.Add(-1) == 0 && g.life.retired.Load() {
		g.life.setIdle()
	}
}

// retire marks the generation replaced: it ends once its requests are
// done and the one before it has ended.
func (l *genLife) retire() {
	l.retired.Store(true)
	go func() {
		<-l.idle
		if l.prev != nil {
			<-l.prev
		}
		l.prev = nil
		close(l.ended)
	}()
	if l.refs.Load() == 0 {
		l.setIdle()
	}
}

func (l *genLife) setIdle() { l.once.Do(func() { close(l.idle) }) }

// Generation is what a reload puts in force in one step (the routes and
// peers are the planner's, taken when it is stored).
type Generation struct {
	Config    Config // validated with the whole file
	Policy    *access.Policy
	Rules     []Rule
	Auth      Authenticator // nil: off
	Cache     *cache.Cache  // nil: off (a view with this generation's settings: Cache.Reconfigured)
	AccessLog *AccessLog    // nil: none
	// LogFormat is access_log_format (nil: Squid's native line);
	// StripQueryTerms cuts logged URLs' queries.
	LogFormat       *LogFormat
	StripQueryTerms bool
	// Port, when set, is the plain listener's port as now bound (a
	// listener that moved): X-Cache-Lookup names it.
	Port string
}

// runtimeConfig is Config with its words parsed.
type runtimeConfig struct {
	Config
	// named: the name was configured, not defaulted to the host name.
	named bool
	// tag ends this process's Via version under the default name.
	tag         []byte
	allow       []netip.Prefix
	retryStatus [600]bool
	via         string // "" when [proxy] via = false
	xff         xffMode
	// reqRemove is request_header_remove less Via and X-Forwarded-For,
	// which reqNoVia and xff carry.
	reqRemove []string
	reqNoVia  bool
	// xCache is the X-Cache and X-Cache-Lookup fields Squid adds to
	// every answer, by [served from the cache][found stored at lookup].
	xCache    [2][2]string
	maxHeader int
}

// Reconfigure puts a whole generation in force at once (a reload, after
// the planner's options and the registry's peers were updated). The
// channel it returns is closed once no request holds the generation it
// replaced, or an older one: what they alone used (a cache or an access
// log file replaced) may be closed then.
func (p *Proxy) Reconfigure(g Generation) <-chan struct{} {
	p.genMu.Lock()
	defer p.genMu.Unlock()
	if g.Port != "" {
		p.port = g.Port
	}
	return p.store(&generation{cfg: p.runtime(g.Config), policy: g.Policy, rules: g.Rules, auth: g.Auth,
		cache: g.Cache, log: logOf(g.AccessLog, g.LogFormat, g.StripQueryTerms), keepQuery: !g.StripQueryTerms, conns: &p.conns, users: p.usersFor(g.Rules)})
}

// logOf is the access log view of file (nil: no access log).
func logOf(file *AccessLog, format *LogFormat, strip bool) *logView {
	if file == nil {
		return nil
	}
	return &logView{file: file, format: format, keepQuery: !strip}
}

// change builds the next generation from the one in force, with set
// applied to a copy, and stores it. The planner's routes are taken anew
// (store).
func (p *Proxy) change(set func(g *generation)) {
	p.genMu.Lock()
	defer p.genMu.Unlock()
	g := *p.gen.Load()
	set(&g)
	p.store(&g)
}

// store puts g in force, with the planner's routes in force now and what
// follows from it outside the requests, and retires the one it replaces;
// the channel is closed once that one and every older one has ended.
func (p *Proxy) store(g *generation) <-chan struct{} {
	if rt := p.planner.Routing(); p.plans != nil {
		g.routing = p.plans.Routing(rt)
	} else {
		g.routing = rt
	}
	g.members = p.members
	if p.source != nil {
		out, _ := netip.ParseAddr(g.cfg.OutgoingAddress) // validated; "" clears it
		p.source.Set(out)
	}
	p.budget.setRatio(g.cfg.RetryBudget)
	g.hops = hops{acct: p.acct, dialer: p.dialer, origins: p.origins, pools: p.pools, budget: p.budget,
		hedges: &p.hedges, stalls: p.stalls, metrics: p.metrics, health: p.acct.Settings(),
		maxHeader: g.cfg.maxHeader, unsolicitedLog: &p.unsolicitedLog, log: p.log, tracer: &p.tracer}
	g.bg = &p.background
	old := p.gen.Load()
	g.life = newLife(old)
	p.gen.Store(g)
	if old == nil {
		done := make(chan struct{})
		close(done)
		return done
	}
	old.life.retire()
	return old.life.ended
}

// current is the generation in force now, for what reads it outside a
// request (a request takes it with acquire).
func (p *Proxy) current() *generation { return p.gen.Load() }

// Update applies a new [proxy] config after validating it.
func (p *Proxy) Update(c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	p.Apply(c)
	return nil
}

// Apply puts a [proxy] section in force that has passed Validate. Pooled
// connections stay: they are TCP connections to the same addresses, and
// everything a config changes about a request is read per request.
func (p *Proxy) Apply(c Config) {
	p.change(func(g *generation) { g.cfg = p.runtime(c) })
}

// SetPolicy replaces the destination policy.
func (p *Proxy) SetPolicy(pol *access.Policy) { p.change(func(g *generation) { g.policy = pol }) }

// SetRules puts the [[rule]] list in force.
func (p *Proxy) SetRules(rs []Rule) { p.change(func(g *generation) { g.rules = rs }) }

// SetAuth switches proxy authentication (nil: off).
func (p *Proxy) SetAuth(a Authenticator) { p.change(func(g *generation) { g.auth = a }) }

// SetCache switches the cache (nil: off).
func (p *Proxy) SetCache(c *cache.Cache) { p.change(func(g *generation) { g.cache = c }) }

// SetAccessLog switches the access log (nil: off), written in format
// (nil: Squid's native line), queries cut when strip.
func (p *Proxy) SetAccessLog(a *AccessLog, format *LogFormat, strip bool) {
	p.change(func(g *generation) { g.log, g.keepQuery = logOf(a, format, strip), !strip })
}

// Cache returns the cache in use, nil when it is off.
func (p *Proxy) Cache() *cache.Cache { return p.gen.Load().cache }

// SetPort names the port clients reach the proxy on, its plain
// listener's as bound (a configured port 0 is a real one by then), as
// Squid names its first http_port in X-Cache-Lookup.
func (p *Proxy) SetPort(port string) {
	p.change(func(g *generation) {
		p.port = port
		rc := *g.cfg // not runtime() again: its Name may be the defaulted one
		rc.xCache = xCacheFields(rc.Name, port)
		g.cfg = &rc
	})
}

// runtime parses c's words. Called under genMu (it reads the port).
func (p *Proxy) runtime(c Config) *runtimeConfig {
	rc := &runtimeConfig{Config: c, maxHeader: int(c.MaxHeaderSize)}
	for _, a := range c.Allow {
		rc.allow = append(rc.allow, netip.Prefix(a))
	}
	for _, s := range c.RetryOnStatus {
		rc.retryStatus[s] = true
	}
	rc.named = c.Name != ""
	rc.tag = []byte("+" + p.instance)
	if !rc.named {
		rc.Name = hostName()
	}
	if c.Via {
		rc.via = "1.1 " + rc.Name + " (peerd/" + p.viaVersion(rc.named) + ")"
	}
	rc.xff = xffModes[c.ForwardedFor]
	for _, name := range c.RequestHeaderRemove {
		switch {
		case strings.EqualFold(name, "Via"):
			rc.reqNoVia = true
		case strings.EqualFold(name, "X-Forwarded-For"):
			rc.xff = xffDelete
		default:
			rc.reqRemove = append(rc.reqRemove, name)
		}
	}
	port := p.port
	if port == "" {
		if _, lp, err := net.SplitHostPort(c.Listen); err == nil {
			port = lp
		}
	}
	rc.xCache = xCacheFields(rc.Name, port)
	return rc
}

// xCacheFields builds the X-Cache and X-Cache-Lookup fields as Squid
// writes them: "X-Cache: HIT from NAME" when the answer came from the
// cache, and "X-Cache-Lookup: HIT from NAME:PORT" when a stored response
// was found (a stale one revalidated is a lookup hit, and the answer a
// miss).
func xCacheFields(name, port string) (f [2][2]string) {
	at := name
	if port != "" {
		at += ":" + port
	}
	word := [2]string{"MISS", "HIT"}
	for served := range 2 {
		for found := range 2 {
			f[served][found] = "X-Cache: " + word[served] + " from " + name + "\r\nX-Cache-Lookup: " + word[found] + " from " + at + "\r\n"
		}
	}
	return f
}

// Allowed reports whether the [proxy] allow ACL admits a client address
// (the ICP listener answers the same clients).
func (p *Proxy) Allowed(a netip.Addr) bool { return p.config().allowed(a) }

// Name is the proxy's name in force (Via, Cache-Status, Proxy-Status).
func (p *Proxy) Name() string { return p.config().Name }

// hostName is the default name: the machine's host name, as Squid's
// visible_hostname defaults to it.
func hostName() string {
	if h, err := os.Hostname(); err == nil && h != "" && !strings.ContainsAny(h, " \t,()") {
		return h
	}
	return "peerd"
}

// viaVersion is the version peerd writes in its Via comment. Under the
// default name it carries this process's instance tag as build metadata
// ("0.1.0+3f9a1c2e"): peerds on one host share the host name, and the tag
// is how one tells its own Via entry (a loop) from another's (a chain).
func (p *Proxy) viaVersion(named bool) string {
	if named {
		return p.version
	}
	return p.version + "+" + p.instance
}

// allowed reports whether the [proxy] allow ACL admits a.
func (c *runtimeConfig) allowed(a netip.Addr) bool {
	for _, pr := range c.allow {
		if pr.Contains(a) {
			return true
		}
	}
	return false
}

// background runs the revalidations behind stale answers, through the
// proxy itself on in-memory connections; Shutdown waits for its tasks.
type background struct {
	tasks taskGroup
	serve func(nc net.Conn, from client) // serves nc as a client connection from from
}
