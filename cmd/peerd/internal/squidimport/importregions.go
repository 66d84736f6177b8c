package squidimport

// This file holds import-squid's joint translation of the routing lines:
// every peer's cache_peer_access (and cache_peer_domain) list, and the
// always_direct and never_direct lists, evaluated together as Squid
// evaluates them for each request. The ACLs those lines name split the
// requests into regions, one per combination of their truth values; for
// each region Squid's answer is worked out (which peers may be used, and
// whether DIRECT is allowed, only, or never), and one [[route]] per region
// gives it exactly that.
//
// Routes match first-match, like Squid's lists: regions are written with
// every ACL true before false, so a region's route needs only the ACLs it
// holds true (those it holds false were caught by the routes before it),
// and the region where all are false is the catch-all. Two ACLs of one
// kind held true at once are written as their intersection (domains,
// addresses, ports, methods, users); where that, or an ACL's type, cannot
// be said in a route, the route is made wider and given only what every
// region it may catch allows: it fails closed, never sending a request to
// a peer (or DIRECT) Squid would not have used.

import (
	"maps"
	"slices"
	"strconv"
	"strings"
)

// maxRegionACLs bounds the ACLs the regions are made of (2^n regions).
const maxRegionACLs = 10

// regionACL is one ACL the routing lines name.
type regionACL struct {
	name string
	key  string // its [[route]] key; "" when it cannot be said in a route
	vals []string
}

// hops is one region's answer: the peers allowed and DIRECT.
type hops map[string]bool

const directHop = "DIRECT"

// routeLists are the routing lines: each restricted peer's list, and
// always_direct and never_direct.
type routeLists struct {
	peer          map[string][]accessLine
	always, never []accessLine
}

// regionRoutes writes the routes; false when the lines name too many
// ACLs for regions (the caller falls back, failing closed).
func (s *squidImport) regionRoutes() bool {
	lists := routeLists{peer: map[string][]accessLine{}, always: s.alwaysDirect, never: s.neverDirect}
	known := map[string]bool{}
	for _, p := range s.peers {
		known[p.name] = true
	}
	for _, pl := range s.peerAccessLines {
		if !known[pl.peer] {
			s.note(pl.line, "cache_peer_access %s: no cache_peer has that name", pl.peer)
			continue
		}
		lists.peer[pl.peer] = append(lists.peer[pl.peer], pl.accessLine)
	}
	acls, index := s.regionACLs(lists)
	if len(acls) > maxRegionACLs {
		return false
	}
	n := len(acls)
	var regions []uint32 // the feasible ones, in route order; bit i set: ACL i false
	answers := map[uint32]hops{}
	for r := uint32(0); r < 1<<n; r++ {
		if !s.feasible(acls, r) {
			continue
		}
		regions = append(regions, r)
		answers[r] = s.regionAnswer(lists, index, r)
	}
	var routes []importRule
	for i, r := range regions {
		keys, expressed := s.regionKeys(acls, r)
		// What the route may catch: this region and the later ones that
		// hold true every ACL it says (only this one when it says all).
		ans := maps.Clone(answers[r])
		for _, q := range regions[i+1:] {
			if q&expressed == 0 {
				for h := range ans {
					if !answers[q][h] {
						delete(ans, h)
					}
				}
			}
		}
		routes = append(routes, s.hopsRoute(keys, ans))
	}
	// Routes after which every later one answers alike are not needed.
	for len(routes) > 1 && sameRoute(routes[len(routes)-1], routes[len(routes)-2]) {
		routes[len(routes)-2].keys = nil
		routes = routes[:len(routes)-1]
	}
	// The catch-all, when it may use every peer (or goes DIRECT only), is
	// the global default ([proxy] direct), which requests no route
	// matches get.
	if last := routes[len(routes)-1]; len(last.keys) == 0 && (len(last.peers) == len(s.peers) || last.direct == "always") {
		s.direct = last.direct
		routes = routes[:len(routes)-1]
	}
	s.routes = append(s.routes, routes...)
	return true
}

// regionACLs lists the ACLs the lines name (all, which holds for every
// request, left out) and where each is.
func (s *squidImport) regionACLs(lists routeLists) ([]regionACL, map[string]int) {
	var acls []regionACL
	index := map[string]int{}
	add := func(ls []accessLine) {
		for _, l := range ls {
			for _, tok := range l.acls {
				name := strings.TrimPrefix(tok, "!")
				if _, ok := index[name]; ok || name == "all" && s.builtin("all") {
					continue
				}
				index[name] = len(acls)
				ra := regionACL{name: name}
				if a := s.acls[name]; a != nil {
					// A dst without -n matches literal addresses in a
					// route (the planner resolves nothing): a name that
					// resolves into it takes the route of the region
					// without it, as the translation line by line did.
					key, vals, err := a.condition(name, false, true)
					if err == nil && key != "" && checked(name, key, vals) == nil {
						ra.key, ra.vals = key, vals
					}
				}
				acls = append(acls, ra)
			}
		}
	}
	for _, p := range s.peers {
		add(lists.peer[p.name])
	}
	add(lists.always)
	add(lists.never)
	return acls, index
}

// lineHolds reports whether a line matches the requests of region r.
func lineHolds(l accessLine, index map[string]int, r uint32) bool {
	for _, tok := range l.acls {
		name, neg := strings.CutPrefix(tok, "!")
		v := true // all
		if i, ok := index[name]; ok {
			v = r&(1<<i) == 0
		}
		if v == neg {
			return false
		}
	}
	return true
}

// allowed is a list's answer for region r: the first line that matches,
// else the opposite of the last line; def with no lines.
func allowed(ls []accessLine, index map[string]int, r uint32, def bool) bool {
	for _, l := range ls {
		if lineHolds(l, index, r) {
			return l.allow
		}
	}
	if len(ls) == 0 {
		return def
	}
	return !ls[len(ls)-1].allow
}

// regionAnswer is what Squid does with a request of region r: always_direct
// first (DIRECT only), then never_direct (peers only), else both; each
// peer by its own list.
func (s *squidImport) regionAnswer(lists routeLists, index map[string]int, r uint32) hops {
	h := hops{}
	if allowed(lists.always, index, r, false) {
		h[directHop] = true
		return h
	}
	if !allowed(lists.never, index, r, false) {
		h[directHop] = true
	}
	for _, p := range s.peers {
		if allowed(lists.peer[p.name], index, r, true) {
			h[p.name] = true
		}
	}
	return h
}

// regionKeys are the match keys of region r's route, and the ACLs they
// say (the true ones that could be said).
func (s *squidImport) regionKeys(acls []regionACL, r uint32) (map[string][]string, uint32) {
	keys := map[string][]string{}
	var expressed uint32
	for i, a := range acls {
		if r&(1<<i) != 0 || a.key == "" {
			continue
		}
		prev, ok := keys[a.key]
		if !ok {
			keys[a.key] = a.vals
			expressed |= 1 << i
			continue
		}
		if both, ok, _ := intersectValues(a.key, prev, a.vals); ok {
			keys[a.key] = both
			expressed |= 1 << i
		}
	}
	return keys, expressed
}

// feasible reports whether some request can be in region r: the true
// ACLs of one kind whose intersection is known must share something.
func (s *squidImport) feasible(acls []regionACL, r uint32) bool {
	keys := map[string][]string{}
	for i, a := range acls {
		if r&(1<<i) != 0 || a.key == "" {
			continue
		}
		prev, ok := keys[a.key]
		if !ok {
			keys[a.key] = a.vals
			continue
		}
		both, known, empty := intersectValues(a.key, prev, a.vals)
		if known && empty {
			return false
		}
		if known {
			keys[a.key] = both
		}
	}
	return true
}

// hopsRoute is the route that gives a region its answer.
func (s *squidImport) hopsRoute(keys map[string][]string, h hops) importRule {
	var peers []string
	for _, p := range s.peers {
		if h[p.name] {
			peers = append(peers, p.name)
		}
	}
	direct := "never"
	switch {
	case h[directHop] && len(peers) == 0:
		direct = "always"
	case h[directHop]:
		direct = s.direct
		if direct == "" || direct == "never" || direct == "always" {
			direct = "allow"
		}
	}
	return importRule{keys: keys, peers: peers, direct: direct, routed: true}
}

func sameRoute(a, b importRule) bool {
	return a.direct == b.direct && slices.Equal(a.peers, b.peers)
}

// intersectValues is the values of one key held true by two ACLs at once:
// ok false when it cannot be worked out (regular expressions), empty
// when nothing is in both.
func intersectValues(key string, a, b []string) (out []string, ok, empty bool) {
	switch key {
	case "domains":
		for _, x := range a {
			for _, y := range b {
				if d, in := domainBoth(x, y); in {
					out = append(out, d)
				}
			}
		}
	case "src", "dst":
		sa, ok1 := prefixSet(a)
		sb, ok2 := prefixSet(b)
		if !ok1 || !ok2 {
			return nil, false, false
		}
		out = sa.and(sb).cidrs()
	case "ports":
		for _, x := range a {
			for _, y := range b {
				lo1, hi1, ok1 := portRange(x)
				lo2, hi2, ok2 := portRange(y)
				if !ok1 || !ok2 {
					return nil, false, false
				}
				if lo, hi := max(lo1, lo2), min(hi1, hi2); lo <= hi {
					if lo == hi {
						out = append(out, strconv.Itoa(lo))
					} else {
						out = append(out, strconv.Itoa(lo)+"-"+strconv.Itoa(hi))
					}
				}
			}
		}
	case "methods", "users":
		if key == "users" && slices.Contains(a, "*") {
			return b, true, len(b) == 0
		}
		if key == "users" && slices.Contains(b, "*") {
			return a, true, len(a) == 0
		}
		for _, x := range a {
			if slices.ContainsFunc(b, func(y string) bool { return strings.EqualFold(x, y) }) {
				out = append(out, x)
			}
		}
	default:
		return nil, false, false
	}
	return out, true, len(out) == 0
}

// domainBoth is what two dstdomain values both match: the narrower when
// one holds the other ("x.a.com" and ".a.com": "x.a.com").
func domainBoth(x, y string) (string, bool) {
	x, y = strings.ToLower(strings.TrimSuffix(x, ".")), strings.ToLower(strings.TrimSuffix(y, "."))
	under := func(name, suffix string) bool { // name is suffix or under it (suffix ".a.com")
		return name == suffix[1:] || strings.HasSuffix(name, suffix)
	}
	xs, ys := strings.HasPrefix(x, "."), strings.HasPrefix(y, ".")
	switch {
	case !xs && !ys:
		return x, x == y
	case xs && !ys:
		return y, under(y, x)
	case !xs && ys:
		return x, under(x, y)
	case under(strings.TrimPrefix(x, "."), y):
		return x, true
	case under(strings.TrimPrefix(y, "."), x):
		return y, true
	}
	return "", false
}

// portRange reads "80" or "1025-65535".
func portRange(v string) (lo, hi int, ok bool) {
	a, b, isRange := strings.Cut(v, "-")
	lo, err1 := strconv.Atoi(a)
	hi = lo
	var err2 error
	if isRange {
		hi, err2 = strconv.Atoi(b)
	}
	return lo, hi, err1 == nil && err2 == nil
}
