package forwarding

// This file holds the config generation: everything a reload changes that
// a request reads ([proxy] with its words parsed, the destination policy,
// [[rule]], [auth], the planner's routes and peers, the cache, the access
// log, the [health] settings a walk reads, the revalidations in the
// background), built whole and put in force with one atomic store. A request
// loads the generation once, when its head has been read, and is served
// under it to its end: a reload while it is in flight changes nothing it
// sees.

import (
	"net"
	"net/netip"
	"os"
	"strings"

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
	cache   *cache.Cache     // nil: the cache is off
	log     *AccessLog       // nil: no access log
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
}

// Generation is what a reload puts in force in one step (the routes and
// peers are the planner's, taken when it is stored).
type Generation struct {
	Config    Config // validated with the whole file
	Policy    *access.Policy
	Rules     []Rule
	Auth      Authenticator // nil: off
	Cache     *cache.Cache  // nil: off
	AccessLog *AccessLog    // nil: none
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
// the planner's options and the registry's peers were updated).
func (p *Proxy) Reconfigure(g Generation) {
	p.genMu.Lock()
	defer p.genMu.Unlock()
	if g.Port != "" {
		p.port = g.Port
	}
	p.store(&generation{cfg: p.runtime(g.Config), policy: g.Policy, rules: g.Rules, auth: g.Auth,
		cache: g.Cache, log: g.AccessLog, conns: &p.conns, users: p.usersFor(g.Rules)})
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
// follows from it outside the requests.
func (p *Proxy) store(g *generation) {
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
	p.gen.Store(g)
}

// current is the generation in force now.
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

// SetAccessLog switches the access log (nil: off).
func (p *Proxy) SetAccessLog(a *AccessLog) { p.change(func(g *generation) { g.log = a }) }

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
