package access

import (
	"strconv"
	"strings"
	"testing"
)

func TestCanonicalHost(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		err      error
	}{
		{"example.com", "example.com", nil},
		{"Example.COM", "Example.COM", nil},
		{"example.com.", "example.com", nil},
		{"name..", "name", nil},
		{"127.0.0.1", "127.0.0.1", nil},
		{"127.0.0.1.", "127.0.0.1", nil},
		{"2130706433", "127.0.0.1", nil},
		{"127.1", "127.0.0.1", nil},
		{"127.0.1", "127.0.0.1", nil},
		{"0x7f.0.0.1", "127.0.0.1", nil},
		{"0X7F.1", "127.0.0.1", nil},
		{"0177.0.0.1", "127.0.0.1", nil},
		{"0x7f000001", "127.0.0.1", nil},
		{"017700000001", "127.0.0.1", nil},
		{"0x", "0.0.0.0", nil},
		{"0", "0.0.0.0", nil},
		{"169.254.169.254", "169.254.169.254", nil},
		{"10.0.0.256", "", ErrBadIPv4},
		{"4294967296", "", ErrBadIPv4},
		{"1.2.3.4.5", "", ErrBadIPv4},
		{"08.0.0.1", "", ErrBadIPv4},
		{"foo.123", "", ErrBadIPv4},
		{"a..b", "", ErrEmptyLabel},
		{".a", "", ErrEmptyLabel},
		{"...", "", ErrEmptyHost},
		{"", "", ErrEmptyHost},
		{"1.2.3.x", "1.2.3.x", nil}, // the last label is a name: resolved, not read as an address
		{"0x1g.com", "0x1g.com", nil},
	} {
		got, changed, err := CanonicalHost(nil, []byte(tc.in))
		if err != tc.err {
			t.Errorf("%q: error %v; want %v", tc.in, err, tc.err)
			continue
		}
		if err != nil {
			continue
		}
		s := tc.in
		if changed {
			s = string(got)
		}
		if s != tc.want || changed != (tc.want != tc.in) {
			t.Errorf("%q: %q (changed %v); want %q", tc.in, s, changed, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { CanonicalHost(nil, []byte("origin.example.com")) }); n != 0 {
		t.Errorf("a canonical name costs %v allocations; want 0", n)
	}
}

// referenceAton is inet_aton by another road: strconv's base-0 parsing,
// minus the prefixes and underscores inet_aton does not know.
func referenceAton(s string) (string, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return "", false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		lp := strings.ToLower(p)
		if p == "" || strings.ContainsAny(p, "_+-") || strings.HasPrefix(lp, "0b") || strings.HasPrefix(lp, "0o") {
			return "", false
		}
		if p == "0x" || p == "0X" {
			continue
		}
		v, err := strconv.ParseUint(p, 0, 32)
		if err != nil {
			return "", false
		}
		vals[i] = v
	}
	var a uint64
	for i := 0; i < len(vals)-1; i++ {
		if vals[i] > 255 {
			return "", false
		}
		a |= vals[i] << (24 - 8*i)
	}
	lastBits := 32 - 8*(len(vals)-1)
	if vals[len(vals)-1] >= 1<<lastBits {
		return "", false
	}
	a |= vals[len(vals)-1]
	return strconv.Itoa(int(a>>24)) + "." + strconv.Itoa(int(a>>16&255)) + "." + strconv.Itoa(int(a>>8&255)) + "." + strconv.Itoa(int(a&255)), true
}

// FuzzCanonicalHost: against the reference for anything that ends in a
// number; for everything else, the result has no trailing dot, no empty
// label, and canonicalising it again changes nothing.
func FuzzCanonicalHost(f *testing.F) {
	for _, s := range []string{"2130706433", "127.1", "0x7f.0.0.1", "0177.0.0.1", "127.0.0.1.", "name..", "a..b",
		"0x", "08", "1.2.3.4.5", "0xffffffff", "4294967296", "example.com", "1e3", "0b1", "0o7", "1_0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, changed, err := CanonicalHost(nil, []byte(s))
		trimmed := strings.TrimRight(s, ".")
		labels := strings.Split(trimmed, ".")
		if trimmed != "" && numericLabel([]byte(labels[len(labels)-1])) && !strings.Contains(trimmed, "..") && !strings.HasPrefix(trimmed, ".") {
			want, ok := referenceAton(trimmed)
			if ok != (err == nil) {
				t.Fatalf("%q: error %v; reference reads it: %v", s, err, ok)
			}
			if ok && ((changed && string(got) != want) || (!changed && s != want)) {
				t.Fatalf("%q: %q; reference %q", s, got, want)
			}
			return
		}
		if err != nil {
			return
		}
		out := s
		if changed {
			out = string(got)
		}
		if strings.HasSuffix(out, ".") || strings.Contains(out, "..") || strings.HasPrefix(out, ".") {
			t.Fatalf("%q: canonical form %q keeps an empty label", s, out)
		}
		if _, again, err := CanonicalHost(nil, []byte(out)); again || err != nil {
			t.Fatalf("%q: canonical form %q is not stable (%v, %v)", s, out, again, err)
		}
	})
}

// TestUnspecifiedRefused: every spelling of the unspecified address is
// refused once made canonical; nothing else is.
func TestUnspecifiedRefused(t *testing.T) {
	for _, h := range []string{"0", "0x", "0.0.0.0", "0.0", "00", "0x0.0", "::", "::ffff:0.0.0.0", "0:0::0", "::ffff:0:0"} {
		canon := []byte(h)
		if !strings.Contains(h, ":") { // an IPv6 host is bracketed: kept as it is
			c, changed, err := CanonicalHost(nil, []byte(h))
			if err != nil {
				t.Fatalf("%s: %v", h, err)
			}
			if changed {
				canon = c
			}
		}
		if err := Unspecified(canon); err == nil {
			t.Errorf("%s (%s): not refused", h, canon)
		}
	}
	for _, h := range []string{"0.0.0.1", "example.com", "::1", "10.0.0.0", "0a.example", "::ffff:0.0.0.1"} {
		if err := Unspecified([]byte(h)); err != nil {
			t.Errorf("%s: refused: %v", h, err)
		}
	}
}
