package selection

// This file holds [[route]] (contract section 18): an ordered list whose
// first match chooses the candidate peers of a request and may override
// the policy and direct. Routes are compiled once per config; a request
// that matches no route costs what it costs without routes.

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/peerd/peerd/internal/conf"
	"github.com/peerd/peerd/internal/match"
)

// RouteSpec is one [[route]] table.
type RouteSpec struct {
	// The match keys (domains, src, ports, methods, users, urls, dst).
	match.Spec
	// Peers are the peers these requests may use ([] = none: only
	// DIRECT, if allowed).
	Peers []string `toml:"peers"`
	// Policy and Direct, when set, override [selection] policy and
	// [proxy] direct for these requests.
	Policy string `toml:"policy"`
	Direct string `toml:"direct"`
}

// Route is a compiled RouteSpec.
type Route struct {
	m         *match.Matcher
	peers     []string
	policy    Policy
	hasPolicy bool
	direct    Direct
	hasDirect bool
}

// CompileRoutes checks and compiles the routes; peer names must be
// configured. Errors name the route and key.
func CompileRoutes(specs []RouteSpec, peerNames map[string]bool) ([]Route, error) {
	var es conf.Errors
	out := make([]Route, 0, len(specs))
	for i, s := range specs {
		bad := func(key, format string, args ...any) {
			es.Add(&conf.Error{Section: "route", Index: i, Name: fmt.Sprint(i), Key: key, Msg: fmt.Sprintf(format, args...)})
		}
		m, err := match.Compile(s.Spec)
		if err != nil {
			bad("match", "%v", err)
			continue
		}
		r := Route{m: m, peers: s.Peers}
		for _, n := range s.Peers {
			if !peerNames[n] {
				bad("peers", "%q is not a configured peer", n)
			}
		}
		if s.Policy != "" {
			if r.policy, err = ParsePolicy(s.Policy); err != nil {
				bad("policy", "%v", err)
			}
			r.hasPolicy = true
		}
		if s.Direct != "" {
			if r.direct, err = ParseDirect(s.Direct); err != nil {
				bad("direct", "%v", err)
			}
			r.hasDirect = true
		}
		out = append(out, r)
	}
	return out, es.Err()
}

// routeIndex finds the first route a request matches: the routes whose
// only key is domains are in one index (a lookup costs O(labels) however
// many there are); the others are tried in order, up to the index's
// answer.
type routeIndex struct {
	domains match.DomainIndex
	others  []int
}

func indexRoutes(routes []Route) *routeIndex {
	x := &routeIndex{}
	for i := range routes {
		if exact, suffix, ok := routes[i].m.DomainsOnly(); ok {
			x.domains.Add(i, exact, suffix)
			continue
		}
		x.others = append(x.others, i)
	}
	return x
}

// routeFor is the index of the first route r matches, -1 for none.
func (x *routeIndex) routeFor(routes []Route, r *Request) int {
	if len(routes) == 0 {
		return -1
	}
	if x == nil {
		x = indexRoutes(routes)
	}
	best := x.domains.Lookup(strings.ToLower(r.Host))
	if len(x.others) == 0 {
		return best
	}
	client, _ := netip.ParseAddr(r.ClientIP)
	mr := match.Request{Host: r.Host, Client: client, Port: r.Port, Method: r.Method, User: r.User, URL: r.URL}
	for _, i := range x.others {
		if best >= 0 && i > best {
			break
		}
		if routes[i].m.Match(&mr) {
			return i
		}
	}
	return best
}
