package squidimport

// This file holds import-squid's translation of the routing directives
// with ACLs into [[route]]: always_direct and never_direct lines (in
// Squid's order: always_direct first), and cache_peer_access /
// cache_peer_domain (a peer restricted to some requests). Where a line
// cannot be expressed, the translation leans to the safe side: never
// going DIRECT where Squid might have, and never using a peer for a
// request Squid would not have sent it.

import (
	"fmt"
	"strings"
)

// directRoutes translates always_direct then never_direct lines; the
// global direct after them is their implicit default.
func (s *squidImport) directRoutes() {
	if len(s.alwaysDirect) == 0 && len(s.neverDirect) == 0 {
		return
	}
	all := s.unrestricted(s.parentNames())
	base := s.direct // set by prefer_direct, or ""
	for _, l := range s.alwaysDirect {
		// Safe side: an unexpressible allow is dropped (not DIRECT), an
		// unexpressible deny widened.
		keys, ok, never := s.lineRule("always_direct", l)
		if !ok || never {
			continue
		}
		if len(keys) == 0 { // matches every request: the lines after it are never reached
			if l.allow {
				s.direct = "always"
				return
			}
			break
		}
		if l.allow {
			s.routes = append(s.routes, importRule{line: l.line, keys: keys, direct: "always", routed: true})
		} else {
			// Not always DIRECT: the never_direct lines decide, which a
			// route cannot hand on to; never_direct's own default is
			// used (never when any never_direct line allows).
			s.routes = append(s.routes, importRule{line: l.line, keys: keys, peers: all, direct: s.neverDefault(base), routed: true})
		}
	}
	if n := len(s.alwaysDirect); n > 0 && !s.alwaysDirect[n-1].allow && len(s.alwaysDirect[n-1].acls) > 0 && s.alwaysDirect[n-1].acls[0] != "all" {
		s.direct = "always" // Squid's default after a last deny: allow
		return
	}
	for _, l := range s.neverDirect {
		// Safe side: never_direct allow is widened, deny dropped.
		flipped := l
		flipped.allow = !l.allow
		keys, ok, never := s.lineRule("never_direct", flipped)
		if !ok || never {
			continue
		}
		if len(keys) == 0 {
			if l.allow {
				s.direct = "never"
			}
			return
		}
		if l.allow {
			s.routes = append(s.routes, importRule{line: l.line, keys: keys, peers: all, direct: "never", routed: true})
		} else {
			d := base
			if d == "" {
				d = "allow"
			}
			s.routes = append(s.routes, importRule{line: l.line, keys: keys, peers: all, direct: d, routed: true})
		}
	}
	if n := len(s.neverDirect); n > 0 && !s.neverDirect[n-1].allow {
		s.direct = "never"
	}
}

// neverDefault is the direct mode for requests the never_direct lines
// would decide: never when any of them allows (the safe side).
func (s *squidImport) neverDefault(base string) string {
	for _, l := range s.neverDirect {
		if l.allow {
			return "never"
		}
	}
	if base == "" {
		return "allow"
	}
	return base
}

// peerAccess translates cache_peer_access and cache_peer_domain: a
// restricted peer's allow lines become routes with it and the
// unrestricted peers; requests no route matches use only the
// unrestricted ones. A deny other than a last "deny all" cannot be
// said this way: that peer gets no requests (listed).
func (s *squidImport) peerAccess() {
	if len(s.peerAccessLines) == 0 {
		return
	}
	free := s.unrestricted(append(s.parentNames(), s.siblingNames()...))
	known := map[string]bool{}
	for _, p := range s.peers {
		known[p.name] = true
	}
	done := map[string]bool{}
	for _, pl := range s.peerAccessLines {
		if done[pl.peer] {
			continue
		}
		done[pl.peer] = true
		if !known[pl.peer] {
			s.note(pl.line, "cache_peer_access %s: no cache_peer has that name", pl.peer)
			continue
		}
		var lines []accessLine
		for _, x := range s.peerAccessLines {
			if x.peer == pl.peer {
				lines = append(lines, x.accessLine)
			}
		}
		if n := len(lines); n > 0 && !lines[n-1].allow && len(lines[n-1].acls) == 1 && lines[n-1].acls[0] == "all" {
			lines = lines[:n-1]
		}
		usable := true
		for _, l := range lines {
			if !l.allow {
				s.note(l.line, "cache_peer_access %s deny %s: a peer's deny lines are not carried over; %s gets no requests", pl.peer, strings.Join(l.acls, " "), pl.peer)
				usable = false
			}
		}
		if !usable {
			continue
		}
		for _, l := range lines {
			keys, ok, never := s.lineRule("cache_peer_access "+pl.peer, l)
			if !ok || never {
				continue
			}
			s.routes = append(s.routes, importRule{line: l.line, keys: keys, peers: s.inOrder(append([]string{pl.peer}, free...)), routed: true})
		}
	}
	s.routes = append(s.routes, importRule{line: s.peerAccessLines[len(s.peerAccessLines)-1].line, peers: free, routed: true})
}

// unrestricted are the names without cache_peer_access or
// cache_peer_domain lines: the peers any request may use.
func (s *squidImport) unrestricted(names []string) []string {
	restricted := map[string]bool{}
	for _, pl := range s.peerAccessLines {
		restricted[pl.peer] = true
	}
	var out []string
	for _, n := range names {
		if !restricted[n] {
			out = append(out, n)
		}
	}
	return out
}

// inOrder lists names in squid.conf's order of the peers (Squid's
// first-up and default choices follow it).
func (s *squidImport) inOrder(names []string) []string {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []string
	for _, p := range s.peers {
		if want[p.name] {
			out = append(out, p.name)
		}
	}
	return out
}

// peerAccessLine is one cache_peer_access or cache_peer_domain line.
type peerAccessLine struct {
	peer string
	accessLine
}

// cachePeerAccess reads "cache_peer_access NAME allow|deny ACL...".
func (s *squidImport) cachePeerAccess(n int, w []string) {
	if len(w) < 2 {
		s.note(n, "cache_peer_access %s: want a peer and allow or deny", strings.Join(w, " "))
		return
	}
	if l := s.accessList(n, "cache_peer_access", w[1:]); l != nil {
		s.peerAccessLines = append(s.peerAccessLines, peerAccessLine{peer: w[0], accessLine: *l})
	}
}

// cachePeerDomain reads "cache_peer_domain NAME [!]DOMAIN...": the peer
// only for those domains (a negated domain: never for it).
func (s *squidImport) cachePeerDomain(n int, w []string) {
	if len(w) < 2 {
		s.note(n, "cache_peer_domain %s: want a peer and domains", strings.Join(w, " "))
		return
	}
	name := fmt.Sprintf("cache_peer_domain:%d", n)
	a := &squidACL{typ: "dstdomain", flags: map[string]bool{}}
	for _, d := range w[1:] {
		if strings.HasPrefix(d, "!") {
			s.peerAccessLines = append(s.peerAccessLines, peerAccessLine{peer: w[0], accessLine: accessLine{line: n, allow: false, acls: []string{"negated-domain"}}})
			return
		}
		a.values = append(a.values, d)
	}
	s.acls[name] = a
	s.peerAccessLines = append(s.peerAccessLines, peerAccessLine{peer: w[0], accessLine: accessLine{line: n, allow: true, acls: []string{name}}})
}

func (s *squidImport) parentNames() []string { return s.peerNames("parent") }

func (s *squidImport) siblingNames() []string { return s.peerNames("sibling") }

func (s *squidImport) peerNames(typ string) []string {
	var out []string
	for _, p := range s.peers {
		if p.typ == typ {
			out = append(out, p.name)
		}
	}
	return out
}
