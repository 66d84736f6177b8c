package squidimport

// This file holds import-squid's translation of icp_access: Squid's
// ordered allow/deny lines, evaluated per query source, become the one
// list of addresses that [icp] allow holds. Only the source can be known
// of a query, so src ACLs (and all) carry over exactly; a line with any
// other ACL fails closed (an allow is dropped, a deny widened to its src
// part). With no icp_access line Squid answers nobody, and so does the
// import: it leaves the ICP port closed.

import (
	"net/netip"
	"slices"
	"strings"
)

// addrRange is the addresses lo..hi of one family.
type addrRange struct{ lo, hi netip.Addr }

// addrSet is a set of addresses: sorted, disjoint ranges per family.
type addrSet struct{ v4, v6 []addrRange }

var (
	v4All = addrRange{netip.AddrFrom4([4]byte{}), netip.AddrFrom4([4]byte{255, 255, 255, 255})}
	v6All = addrRange{netip.IPv6Unspecified(), netip.AddrFrom16([16]byte{255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255})}
)

func allAddrs() addrSet { return addrSet{v4: []addrRange{v4All}, v6: []addrRange{v6All}} }

// prefixSet is the set a list of CIDRs covers.
func prefixSet(cidrs []string) (addrSet, bool) {
	var s addrSet
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if a, aerr := netip.ParseAddr(c); aerr == nil {
			p, err = netip.PrefixFrom(a, a.BitLen()), nil
		}
		if err != nil {
			return s, false
		}
		p = p.Masked()
		r := addrRange{p.Addr(), lastAddr(p)}
		if p.Addr().Is4() {
			s.v4 = append(s.v4, r)
		} else {
			s.v6 = append(s.v6, r)
		}
	}
	s.v4, s.v6 = normalize(s.v4), normalize(s.v6)
	return s, true
}

// normalize sorts ranges and merges those that touch.
func normalize(rs []addrRange) []addrRange {
	slices.SortFunc(rs, func(a, b addrRange) int { return a.lo.Compare(b.lo) })
	var out []addrRange
	for _, r := range rs {
		if n := len(out); n > 0 && (r.lo.Compare(out[n-1].hi) <= 0 || out[n-1].hi.Next() == r.lo) {
			if r.hi.Compare(out[n-1].hi) > 0 {
				out[n-1].hi = r.hi
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

// complementOf is the family's addresses outside rs.
func complementOf(rs []addrRange, all addrRange) []addrRange {
	var out []addrRange
	next := all.lo
	done := false
	for _, r := range rs {
		if r.lo.Compare(next) > 0 {
			out = append(out, addrRange{next, r.lo.Prev()})
		}
		if r.hi == all.hi {
			done = true
			break
		}
		next = r.hi.Next()
	}
	if !done {
		out = append(out, addrRange{next, all.hi})
	}
	return out
}

// intersect is the addresses in both.
func intersect(a, b []addrRange) []addrRange {
	var out []addrRange
	for _, x := range a {
		for _, y := range b {
			lo, hi := x.lo, x.hi
			if y.lo.Compare(lo) > 0 {
				lo = y.lo
			}
			if y.hi.Compare(hi) < 0 {
				hi = y.hi
			}
			if lo.Compare(hi) <= 0 {
				out = append(out, addrRange{lo, hi})
			}
		}
	}
	return normalize(out)
}

func (s addrSet) complement() addrSet {
	return addrSet{complementOf(s.v4, v4All), complementOf(s.v6, v6All)}
}
func (s addrSet) and(o addrSet) addrSet {
	return addrSet{intersect(s.v4, o.v4), intersect(s.v6, o.v6)}
}
func (s addrSet) or(o addrSet) addrSet {
	return addrSet{normalize(append(slices.Clone(s.v4), o.v4...)), normalize(append(slices.Clone(s.v6), o.v6...))}
}
func (s addrSet) minus(o addrSet) addrSet { return s.and(o.complement()) }

// cidrs writes the set as the fewest CIDRs.
func (s addrSet) cidrs() []string {
	var out []string
	for _, r := range append(slices.Clone(s.v4), s.v6...) {
		for _, p := range rangePrefixes(r.lo, r.hi) {
			out = append(out, p.String())
		}
	}
	return out
}

// icpSources evaluates the icp_access lines as Squid does for every
// source address (the first line that matches decides; after the last,
// the opposite of its action; with none, deny) and returns the sources
// answered.
func (s *squidImport) icpSources() addrSet {
	undecided, allowed := allAddrs(), addrSet{}
	for _, l := range s.icpAccessLines {
		m, ok := s.icpLineSet(l)
		if !ok {
			continue
		}
		if l.allow {
			allowed = allowed.or(undecided.and(m))
		}
		undecided = undecided.minus(m)
	}
	if n := len(s.icpAccessLines); n > 0 && !s.icpAccessLines[n-1].allow {
		allowed = allowed.or(undecided)
	}
	return allowed
}

// icpLineSet is the sources one icp_access line matches; ok is false for
// an allow line that cannot be said (dropped: fail closed).
func (s *squidImport) icpLineSet(l accessLine) (addrSet, bool) {
	m := allAddrs()
	for _, tok := range l.acls {
		name, neg := strings.CutPrefix(tok, "!")
		a := s.acls[name]
		var set addrSet
		ok := a != nil && a.typ == "src" && a.bad == "" && len(a.values) > 0
		if ok {
			var cidrs []string
			for _, v := range a.values {
				if v == "all" {
					cidrs = append(cidrs, "0.0.0.0/0", "::/0")
					continue
				}
				ps, err := squidCIDRs(v)
				if err != nil {
					ok = false
					break
				}
				cidrs = append(cidrs, ps...)
			}
			set, ok = prefixSet(cidrs)
		}
		if !ok {
			if l.allow {
				s.note(l.line, "icp_access allow %s: not carried over (only src acls can be said of an ICP query)", strings.Join(l.acls, " "))
				return m, false
			}
			s.note(l.line, "icp_access deny %s: %s is not a src acl; widened to the rest of the line", strings.Join(l.acls, " "), name)
			continue
		}
		if neg {
			set = set.complement()
		}
		m = m.and(set)
	}
	return m, true
}
