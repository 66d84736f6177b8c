package access

// This file holds host canonicalisation: the one spelling of a request's
// host that every check looks at and every next hop is sent.

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
)

// Errors of CanonicalHost; the client gets 400 naming them.
var (
	ErrEmptyHost  = errors.New("empty host")
	ErrEmptyLabel = errors.New("host has an empty label (\"..\" or a leading dot)")
	ErrBadIPv4    = errors.New("host ends in a number but is not an IPv4 address")
)

// CanonicalHost appends to dst the canonical spelling of host (a name or
// an IPv4 literal, without brackets) and reports whether it differs from
// host. Checks must see what a parent or a resolver will see: Squid and
// inet_aton read 2130706433, 127.1, 0x7f.0.0.1, 0177.0.0.1 and
// "127.0.0.1." all as 127.0.0.1, and "name.." as "name". So:
//
//   - every trailing dot is dropped; an empty label elsewhere is refused;
//   - a host whose last label is a number (decimal, 0x hex or 0-octal, as
//     the WHATWG URL standard decides) is read with inet_aton's rules
//     (one to four parts, the last filling the remaining bytes) and
//     written as a dotted quad; one that does not read is refused;
//   - anything else is kept as it is (names are compared without case).
//
// A host that needs no change appends nothing and allocates nothing.
func CanonicalHost(dst []byte, host []byte) (out []byte, changed bool, err error) {
	h := host
	for len(h) > 0 && h[len(h)-1] == '.' {
		h = h[:len(h)-1]
	}
	if len(h) == 0 {
		return dst, false, ErrEmptyHost
	}
	last := 0
	for i := 0; i < len(h); i++ {
		if h[i] == '.' {
			if i == last {
				return dst, false, ErrEmptyLabel
			}
			last = i + 1
		}
	}
	if !numericLabel(h[last:]) {
		if len(h) == len(host) {
			return dst, false, nil
		}
		return append(dst, h...), true, nil
	}
	a, ok := inetAton(h)
	if !ok {
		return dst, false, ErrBadIPv4
	}
	start := len(dst)
	for i := 0; i < 4; i++ {
		if i > 0 {
			dst = append(dst, '.')
		}
		dst = strconv.AppendUint(dst, uint64(a>>(24-8*i)&0xff), 10)
	}
	return dst, string(dst[start:]) != string(host), nil
}

// numericLabel reports whether a label is a number in the URL standard's
// sense: decimal digits, or 0x/0X followed by hex digits (possibly none).
func numericLabel(l []byte) bool {
	if len(l) == 0 {
		return false
	}
	if len(l) >= 2 && l[0] == '0' && (l[1] == 'x' || l[1] == 'X') {
		for _, c := range l[2:] {
			if !isHex(c) {
				return false
			}
		}
		return true
	}
	for _, c := range l {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// inetAton reads s as inet_aton(3) does: one to four parts separated by
// dots, each decimal, 0x hex or 0-octal; all parts but the last are one
// byte, the last fills the rest of the 32 bits.
func inetAton(s []byte) (uint32, bool) {
	var parts [4]uint64
	n := 0
	for i := 0; i <= len(s); {
		j := i
		for j < len(s) && s[j] != '.' {
			j++
		}
		if n == 4 {
			return 0, false
		}
		v, ok := atonPart(s[i:j])
		if !ok {
			return 0, false
		}
		parts[n] = v
		n++
		i = j + 1
	}
	var a uint64
	for k := 0; k < n-1; k++ {
		if parts[k] > 0xff {
			return 0, false
		}
		a |= parts[k] << (24 - 8*k)
	}
	rest := uint(32 - 8*(n-1))
	if parts[n-1] >= 1<<rest {
		return 0, false
	}
	return uint32(a | parts[n-1]), true
}

// atonPart reads one part: 0x hex (0x alone is 0), 0-octal, or decimal;
// at most 32 bits.
func atonPart(p []byte) (uint64, bool) {
	if len(p) == 0 {
		return 0, false
	}
	base, digits := uint64(10), p
	switch {
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		base, digits = 16, p[2:]
	case len(p) >= 2 && p[0] == '0':
		base, digits = 8, p[1:]
	}
	var v uint64
	for _, c := range digits {
		var d uint64
		switch {
		case '0' <= c && c <= '9':
			d = uint64(c - '0')
		case 'a' <= c && c <= 'f':
			d = uint64(c-'a') + 10
		case 'A' <= c && c <= 'F':
			d = uint64(c-'A') + 10
		default:
			return 0, false
		}
		if d >= base {
			return 0, false
		}
		if v = v*base + d; v > 0xffffffff {
			return 0, false
		}
	}
	return v, true
}

// Unspecified refuses a host that is the unspecified address (0.0.0.0,
// ::, ::ffff:0.0.0.0, and every spelling CanonicalHost turns into them:
// "0", "0x", "0.0"), whatever the config and the next hop: no host is
// reached at it, and the kernel under a parent or peerd takes it for
// itself, so a request for http://0/ would reach the next hop's own
// loopback. host is canonical (CanonicalHost), without brackets.
func Unspecified(host []byte) error {
	switch {
	case string(host) == "0.0.0.0":
	case len(host) > 1 && (host[0] == ':' || host[0] == '0') && containsColon(host):
		a, err := netip.ParseAddr(string(host))
		if err != nil || !a.Unmap().IsUnspecified() {
			return nil
		}
	default:
		return nil
	}
	return &Denied{"destination", fmt.Sprintf("%s is the unspecified address, refused whatever the next hop", host)}
}

func containsColon(b []byte) bool {
	for _, c := range b {
		if c == ':' {
			return true
		}
	}
	return false
}
