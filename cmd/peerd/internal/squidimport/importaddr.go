package squidimport

// This file holds how import-squid reads Squid's addresses: an address,
// a CIDR, an address with a dotted netmask, or a range A-B (as the fewest
// CIDRs that cover exactly it).

import (
	"fmt"
	"net/netip"
	"strings"
)

// squidCIDRs reads a Squid src/dst value, which may also be a range
// "A-B" (as the CIDRs that cover exactly it).
func squidCIDRs(v string) ([]string, error) {
	if lo, hi, ok := strings.Cut(v, "-"); ok {
		a, err1 := netip.ParseAddr(lo)
		b, err2 := netip.ParseAddr(hi)
		if err1 != nil || err2 != nil || a.Is4() != b.Is4() || b.Less(a) {
			return nil, fmt.Errorf("not an address range")
		}
		var out []string
		for _, p := range rangePrefixes(a, b) {
			out = append(out, p.String())
		}
		return out, nil
	}
	p, err := squidCIDR(v)
	if err != nil {
		return nil, err
	}
	return []string{p}, nil
}

// rangePrefixes are the fewest prefixes that cover exactly [a, b].
func rangePrefixes(a, b netip.Addr) []netip.Prefix {
	var out []netip.Prefix
	for {
		bits := a.BitLen()
		// Widen while the block starts at a and ends at or before b.
		for bits > 0 {
			p := netip.PrefixFrom(a, bits-1).Masked()
			if p.Addr() != a || b.Less(lastAddr(p)) {
				break
			}
			bits--
		}
		p := netip.PrefixFrom(a, bits)
		out = append(out, p)
		last := lastAddr(p)
		if last == b || len(out) > 256 {
			return out
		}
		a = last.Next()
	}
}

// lastAddr is the last address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As16()
	off := 128 - p.Addr().BitLen()
	for i := p.Bits() + off; i < 128; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a := netip.AddrFrom16(b)
	if p.Addr().Is4() {
		return a.Unmap()
	}
	return a
}

// squidCIDR reads a Squid src/dst value: an address, a CIDR, or an
// address with a dotted netmask.
func squidCIDR(v string) (string, error) {
	if a, err := netip.ParseAddr(v); err == nil {
		return a.String(), nil
	}
	if p, err := netip.ParsePrefix(v); err == nil {
		return p.Masked().String(), nil
	}
	if addr, mask, ok := strings.Cut(v, "/"); ok {
		a, err1 := netip.ParseAddr(addr)
		m, err2 := netip.ParseAddr(mask)
		if err1 == nil && err2 == nil && a.Is4() && m.Is4() {
			b := m.As4()
			bits := 0
			x := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
			for x&0x80000000 != 0 {
				bits++
				x <<= 1
			}
			if x == 0 {
				return netip.PrefixFrom(a, bits).Masked().String(), nil
			}
		}
	}
	return "", fmt.Errorf("not an address or CIDR (ranges and host names are not carried over)")
}

// lossyAccess records an http_access line that could not be said as it
// is (an allow dropped, a deny widened): the import refuses to write a
// config without -lossy, since the result may refuse clients Squid served.
func (s *squidImport) lossyAccess(what string, line int) {
	if what == "http_access" {
		s.lossy = append(s.lossy, s.notes[len(s.notes)-1])
	}
}
