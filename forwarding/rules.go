package forwarding

// This file holds [[rule]] (contract section 18, Squid http_access): an
// ordered list of allow and deny rules with the match keys of [[route]],
// checked after the client address and before the destination policy;
// the first rule that matches decides, and a request no rule matches is
// allowed (its client passed [proxy] allow). Credentials are asked for
// as Squid asks: only by a rule that needs the user, when a request
// reaches it, so a deny that comes first is 403 whatever the password
// (a 407 for a wrong one and a 403 for a right one would tell an
// outsider which passwords are right); authenticate checks them.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"
	"unsafe"

	"github.com/peerd/peerd/auth"
	"github.com/peerd/peerd/internal/conf"
	"github.com/peerd/peerd/internal/match"
)

// RuleSpec is one [[rule]] table.
type RuleSpec struct {
	Action string `toml:"action"`
	// The match keys (domains, src, ports, methods, users, urls, dst).
	match.Spec
	// Line and File are where the rule is (its [[rule]] header), for
	// refusals to name it; set by the config loader.
	Line int    `toml:"-"`
	File string `toml:"-"`
}

// Rule is a compiled RuleSpec.
type Rule struct {
	allow bool
	m     *match.Matcher
	name  string // as refusals name it: "[[rule]] #7, peerd.toml line 42"
}

// ruleName is how refusals name the rule at index i: its number in the
// file, from 1, and its line.
func ruleName(i int, s RuleSpec) string {
	n := fmt.Sprintf("[[rule]] #%d", i+1)
	switch {
	case s.Line > 0 && s.File != "":
		n += fmt.Sprintf(", %s line %d", s.File, s.Line)
	case s.Line > 0:
		n += fmt.Sprintf(", line %d", s.Line)
	}
	return n
}

// CompileRules checks and compiles the rules; errors name the rule.
func CompileRules(specs []RuleSpec) ([]Rule, error) {
	var es conf.Errors
	out := make([]Rule, 0, len(specs))
	for i, s := range specs {
		bad := func(key, format string, args ...any) {
			es.Add(&conf.Error{Section: "rule", Index: i, Name: fmt.Sprint(i), Key: key, Msg: fmt.Sprintf(format, args...)})
		}
		if s.Action != "allow" && s.Action != "deny" {
			bad("action", `must be "allow" or "deny", got %q`, s.Action)
		}
		m, err := match.Compile(s.Spec)
		if err != nil {
			bad("match", "%v", err)
			continue
		}
		out = append(out, Rule{allow: s.Action == "allow", m: m, name: ruleName(i, s)})
	}
	return out, es.Err()
}

// checkRules applies [[rule]] and [auth] to the request: the index of
// the rule that decided (-1: none), and the refusal (403 by a rule, 407
// or 429 when the user was needed and not proven).
func (rq *request) checkRules() (int, *Error) {
	list, a := rq.gen.rules, rq.gen.auth
	if len(list) == 0 && a == nil {
		return -1, nil
	}
	r := rq.matchRequest()
	login := func() (string, *Error) {
		if e := rq.authenticate(a); e != nil {
			return "", e
		}
		return rq.user, nil
	}
	return walkRules(list, &r, a != nil, login)
}

// walkRules walks the rules in order, as Squid walks http_access: the
// first rule that matches decides. A rule with users is matched on its
// other keys first; only when they match does it need the user, and then
// login proves it (or ends the walk with its 407 or 429). With auth on,
// a request no rule decided needs the user too: authentication that is
// configured is never skipped by falling off the end. It returns the
// deciding rule's index (-1: none) and the refusal, nil when allowed.
func walkRules(rs []Rule, r *match.Request, auth bool, login func() (string, *Error)) (int, *Error) {
	proven := false
	prove := func() *Error {
		if proven {
			return nil
		}
		proven = true
		user, e := login()
		r.User = user
		return e
	}
	for i := range rs {
		m := rs[i].m
		if !m.MatchButUser(r) {
			continue
		}
		if m.NeedsUser() {
			if !auth {
				continue // no user can be proven: the rule never matches
			}
			if e := prove(); e != nil {
				return i, e
			}
			if !m.MatchUser(r) {
				continue
			}
		}
		if !rs[i].allow {
			return i, errorf(http.StatusForbidden, CodeAccessDenied, "", "refused by %s", rs[i].name)
		}
		return i, nil
	}
	if auth {
		if e := prove(); e != nil {
			return -1, e
		}
	}
	return -1, nil
}

// matchRequest is the request as the matchers see it.
func (rq *request) matchRequest() match.Request {
	req := &rq.req
	return match.Request{Host: unsafe.String(unsafe.SliceData(req.Host), len(req.Host)), Client: rq.from.addr,
		Port: rq.port, Method: rq.method, User: rq.user, URL: urlString(req.Target), Resolve: rq.resolve,
		Now: rq.start, Facts: rq}
}

// Field is a request header field for the rules: every value of a
// repeated field, joined by ", ", and whether the request has the field
// at all ("User-Agent:" is present and empty, as Squid's ACLs see it).
func (rq *request) Field(name string) (string, bool) {
	var b []byte
	present := false
	for _, f := range rq.req.Fields {
		if strings.EqualFold(string(f.Name), name) {
			if present {
				b = append(b, ", "...)
			}
			present = true
			b = append(b, f.Value...)
		}
	}
	return string(b), present
}

// Conns is the number of connections open from the client's address.
func (rq *request) Conns() int {
	if rq.gen.conns == nil {
		return 0
	}
	return rq.gen.conns.fromSource(rq.from.addr)
}

// UserAddrs is the number of addresses user was seen from lately.
func (rq *request) UserAddrs(user string) int {
	if rq.gen.users == nil {
		return 0
	}
	return rq.gen.users.count(user, rq.start)
}

// usersFor is the proxy's user address book when one of rs has
// max_user_ip, else nil.
func (p *Proxy) usersFor(rs []Rule) *userAddrs {
	for _, r := range rs {
		if r.m.CountsUserAddrs() {
			return &p.users
		}
	}
	return nil
}

const (
	userAddrTTL   = time.Second
	maxUsersKnown = 1 << 16 // at it, users not seen within the TTL are forgotten (all, if none is)
)

// seen notes user at a, now.
func (u *userAddrs) seen(user string, a netip.Addr, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[string]map[netip.Addr]time.Time{}
	}
	if len(u.m) >= maxUsersKnown {
		for name, as := range u.m {
			if u.live(as, now) == 0 {
				delete(u.m, name)
			}
		}
		if len(u.m) >= maxUsersKnown {
			clear(u.m) // all seen within the TTL: start over rather than grow or scan on each request
		}
	}
	as := u.m[user]
	if as == nil {
		as = map[netip.Addr]time.Time{}
		u.m[user] = as
	}
	as[a] = now
}

// count is how many addresses user was seen from within the TTL.
func (u *userAddrs) count(user string, now time.Time) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.live(u.m[user], now)
}

// live counts (and prunes) the addresses seen within the TTL.
func (u *userAddrs) live(as map[netip.Addr]time.Time, now time.Time) int {
	for a, at := range as {
		if now.Sub(at) > userAddrTTL {
			delete(as, a)
		}
	}
	return len(as)
}

// resolve is resolveForRules within the request's connect timeout.
func (rq *request) resolve(host string) []netip.Addr {
	return resolveWithin(host, rq.gen.cfg.ConnectTimeout)
}

// resolveForRules looks a host name up for a [[rule]] with dst (Squid's
// dst ACL does the same), within the connect timeout; a name that does
// not resolve matches no address.
func (p *Proxy) resolveForRules(host string) []netip.Addr {
	return resolveWithin(host, p.config().ConnectTimeout)
}

func resolveWithin(host string, timeout time.Duration) []netip.Addr {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for i := range addrs {
		addrs[i] = addrs[i].Unmap()
	}
	return addrs
}

// passersBy are addresses no operator serves on purpose (RFC 5737 and
// RFC 3849 documentation ranges): a config that serves them without
// credentials serves anyone.
var passersBy = []netip.Addr{netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("2001:db8::7")}

// OpenProxy reports an address from anywhere that c and rules would serve
// a plain GET without credentials (auth: [auth] is configured), and
// whether there is one: the open proxy -check and import-squid warn of.
func OpenProxy(c Config, rules []Rule, auth bool) (netip.Addr, bool) {
	for _, a := range passersBy {
		served := false
		for _, p := range c.Allow {
			served = served || netip.Prefix(p).Contains(a)
		}
		if !served {
			continue
		}
		r := match.Request{Host: "example.com", Client: a, Port: 80, Method: http.MethodGet, URL: "http://example.com/"}
		noCredentials := func() (string, *Error) {
			return "", errorf(http.StatusProxyAuthRequired, CodeAuthRequired, "", "no credentials")
		}
		if _, e := walkRules(rules, &r, auth, noCredentials); e == nil {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// OnLoopback reports whether a listen address takes connections from this
// host only.
func OnLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	a, err := netip.ParseAddr(host)
	return host == "localhost" || err == nil && a.IsLoopback()
}

// authenticate checks the request's Basic credentials ([auth]): the user
// for the access log, or the answer — 407 with a challenge for a missing
// or wrong credential, 429 for a source that keeps failing (a right
// credential is never refused).
func (rq *request) authenticate(a Authenticator) *Error {
	user, v := a.Check(rq.req.Get("Proxy-Authorization"), rq.from.str, rq.start)
	if v == auth.Allowed {
		rq.user = user
		if u := rq.gen.users; u != nil {
			u.seen(user, rq.from.addr, rq.start)
		}
		return nil
	}
	rq.claimed = user // for the access log only: it was not proven
	if v == auth.Slowed {
		e := errorf(http.StatusTooManyRequests, CodeAuthSlowed, "", "too many wrong credentials from %s", rq.from.str)
		e.Fields = "Retry-After: 1\r\n"
		return e
	}
	e := errorf(http.StatusProxyAuthRequired, CodeAuthRequired, "", "proxy authentication required")
	e.Fields = "Proxy-Authenticate: Basic realm=\"" + a.Realm() + "\"\r\n"
	return e
}
