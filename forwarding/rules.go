package forwarding

// This file holds [[rule]] (contract section 18, Squid http_access): an
// ordered list of allow and deny rules with the match keys of [[route]],
// checked after the client address and its credentials and before the
// destination policy; the first rule that matches decides, and a request
// no rule matches is allowed (its client passed [proxy] allow).

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"unsafe"

	"github.com/peerd/peerd/internal/conf"
	"github.com/peerd/peerd/internal/match"
)

// RuleSpec is one [[rule]] table.
type RuleSpec struct {
	Action string `toml:"action"`
	// The match keys (domains, src, ports, methods, users, urls, dst).
	match.Spec
}

// Rule is a compiled RuleSpec.
type Rule struct {
	allow bool
	m     *match.Matcher
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
		out = append(out, Rule{allow: s.Action == "allow", m: m})
	}
	return out, es.Err()
}

// SetRules puts the [[rule]] list in force (on start and reload).
func (p *Proxy) SetRules(rs []Rule) { p.rules.Store(&rs) }

// checkRules applies [[rule]] to the request: the index of the rule that
// decided (-1: none), and the refusal when it denies.
func (tx *txn) checkRules() (int, *Error) {
	rs := tx.cc.p.rules.Load()
	if rs == nil || len(*rs) == 0 {
		return -1, nil
	}
	r := tx.matchRequest()
	i, allow := firstRule(*rs, &r)
	if !allow {
		return i, errorf(http.StatusForbidden, CodeAccessDenied, "", "refused by [[rule]] %d", i)
	}
	return i, nil
}

// firstRule is the index of the first rule r matches (-1: none) and
// whether it allows.
func firstRule(rs []Rule, r *match.Request) (int, bool) {
	for i := range rs {
		if rs[i].m.Match(r) {
			return i, rs[i].allow
		}
	}
	return -1, true
}

// matchRequest is the request as the matchers see it.
func (tx *txn) matchRequest() match.Request {
	req := &tx.req
	return match.Request{Host: unsafe.String(unsafe.SliceData(req.Host), len(req.Host)), Client: tx.cc.remote,
		Port: tx.port, Method: tx.method, User: tx.user, URL: urlString(req.Target), Resolve: tx.cc.p.resolveForRules}
}

// resolveForRules looks a host name up for a [[rule]] with dst (Squid's
// dst ACL does the same), within the connect timeout; a name that does
// not resolve matches no address.
func (p *Proxy) resolveForRules(host string) []netip.Addr {
	ctx, cancel := context.WithTimeout(context.Background(), p.config().ConnectTimeout)
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
