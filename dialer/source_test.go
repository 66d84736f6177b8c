package dialer

import (
	"net/netip"
	"testing"
)

// TestSourceFamilies: the outgoing address is used for destinations of
// its own family only (an IPv4 source cannot reach an IPv6 peer), and a
// nil or cleared Source leaves the choice to the kernel.
func TestSourceFamilies(t *testing.T) {
	v4, v6 := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")
	var s Source
	s.Set(netip.MustParseAddr("127.0.0.2"))
	for _, tc := range []struct {
		src  *Source
		dst  netip.Addr
		want string
	}{
		{&s, v4, "127.0.0.2:0"},
		{&s, netip.MustParseAddr("::ffff:192.0.2.10"), "127.0.0.2:0"},
		{&s, v6, "<nil>"},
		{nil, v4, "<nil>"},
	} {
		d := tc.src.For(tc.dst)
		got := "<nil>"
		if d.LocalAddr != nil {
			got = d.LocalAddr.String()
		}
		if got != tc.want {
			t.Errorf("to %s: from %s; want %s", tc.dst, got, tc.want)
		}
	}
	s.Set(netip.Addr{})
	if d := s.For(v4); d.LocalAddr != nil {
		t.Errorf("cleared, yet from %s", d.LocalAddr)
	}
}
