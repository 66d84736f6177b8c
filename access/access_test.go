package access

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func mustCompile(t *testing.T, c Config, own ...string) *Policy {
	t.Helper()
	var aps []netip.AddrPort
	for _, o := range own {
		aps = append(aps, netip.MustParseAddrPort(o))
	}
	p, err := Compile(c, aps)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// rule returns the rule that refused, or "" for allowed.
func rule(err error) string {
	var d *Denied
	if errors.As(err, &d) {
		return d.Rule
	}
	if err != nil {
		return "error: " + err.Error()
	}
	return ""
}

func TestPorts(t *testing.T) {
	p := mustCompile(t, DefaultConfig())
	for _, tc := range []struct {
		connect bool
		port    int
		want    string
	}{
		{false, 80, ""}, {false, 443, ""}, {false, 8080, ""}, {false, 1025, ""}, {false, 65535, ""},
		{false, 25, "safe_ports"}, {false, 22, "safe_ports"}, {false, 1024, "safe_ports"},
		{true, 443, ""}, {true, 22, "connect_ports"}, {true, 8443, "connect_ports"}, {true, 3180, "connect_ports"},
	} {
		if got := rule(p.CheckPort(tc.connect, tc.port)); got != tc.want {
			t.Errorf("CheckPort(connect=%v, %d) = %q; want %q", tc.connect, tc.port, got, tc.want)
		}
	}
}

func TestDial(t *testing.T) {
	c := DefaultConfig()
	c.DenyTo = mustDests(t, "192.0.2.0/24", "203.0.113.7")
	p := mustCompile(t, c, "10.1.2.3:3128", "10.1.2.3:3180")
	for _, tc := range []struct {
		addr, want string
	}{
		{"93.184.216.34:80", ""},
		{"10.0.0.1:80", ""}, // private networks are origins like any other
		{"10.1.2.3:3128", "deny_to_local"},
		{"10.1.2.3:80", ""}, // the proxy host, on a port peerd does not listen on
		{"127.0.0.1:3180", "deny_to_local"},
		{"127.9.9.9:80", "deny_to_local"},
		{"[::1]:80", "deny_to_local"},
		{"[::ffff:127.0.0.1]:80", "deny_to_local"},
		{"169.254.169.254:80", "deny_to_local"}, // cloud metadata
		{"[fe80::1]:80", "deny_to_local"},
		{"0.0.0.0:80", "deny_to_local"},
		{"224.0.0.1:80", "deny_to_local"},
		{"192.0.2.55:443", "deny_to"},
		{"203.0.113.7:80", "deny_to"},
		{"203.0.113.8:80", ""},
	} {
		if got := rule(p.CheckDial(netip.MustParseAddrPort(tc.addr))); got != tc.want {
			t.Errorf("CheckDial(%s) = %q; want %q", tc.addr, got, tc.want)
		}
	}
	off := DefaultConfig()
	off.DenyToLocal = false
	if got := rule(mustCompile(t, off).CheckDial(netip.MustParseAddrPort("127.0.0.1:3180"))); got != "" {
		t.Errorf("deny_to_local = false still refuses loopback: %q", got)
	}
}

func TestHosts(t *testing.T) {
	c := DefaultConfig()
	c.DenyTo = mustDests(t, "intranet.example", ".corp.example", "198.51.100.0/24")
	p := mustCompile(t, c)
	for _, tc := range []struct{ host, want string }{
		{"intranet.example", "deny_to"}, {"INTRANET.example.", "deny_to"}, {"www.intranet.example", ""},
		{"corp.example", "deny_to"}, {"a.b.corp.example", "deny_to"}, {"notcorp.example", ""},
		{"198.51.100.9", "deny_to"}, {"example.org", ""},
	} {
		if got := rule(p.CheckHost(tc.host)); got != tc.want {
			t.Errorf("CheckHost(%s) = %q; want %q", tc.host, got, tc.want)
		}
	}
}

func TestUpgrade(t *testing.T) {
	c := DefaultConfig()
	if got := mustCompile(t, c).Upgrade("websocket"); got != "" {
		t.Errorf("default passes %q; want no upgrade", got)
	}
	c.Upgrade = []string{"websocket"}
	p := mustCompile(t, c)
	for in, want := range map[string]string{"websocket": "websocket", "WebSocket": "WebSocket", "h2c": "", "websocket, h2c": "", "websocket/13": "websocket/13"} {
		if got := p.Upgrade(in); got != want {
			t.Errorf("Upgrade(%q) = %q; want %q", in, got, want)
		}
	}
}

func mustDests(t *testing.T, ss ...string) []Destination {
	t.Helper()
	out := make([]Destination, len(ss))
	for i, s := range ss {
		if err := out[i].UnmarshalText([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestWords: the typed values refuse bad words where they are decoded.
func TestWords(t *testing.T) {
	for _, w := range []string{"0", "70000", "9-1", "x", "443-", ""} {
		var r PortRange
		if err := r.UnmarshalText([]byte(w)); err == nil {
			t.Errorf("port %q accepted", w)
		}
	}
	for _, w := range []string{"80", "1025-65535", "1-1"} {
		var r PortRange
		if err := r.UnmarshalText([]byte(w)); err != nil {
			t.Errorf("port %q: %v", w, err)
		}
		if b, _ := r.MarshalText(); string(b) != w && w != "1-1" {
			t.Errorf("port %q prints as %q", w, b)
		}
	}
	for _, w := range []string{"10.0.0.0/33", "bad host", "a/b"} {
		var d Destination
		if err := d.UnmarshalText([]byte(w)); err == nil {
			t.Errorf("destination %q accepted", w)
		}
	}
	c := DefaultConfig()
	c.Upgrade = []string{"web socket", "websocket"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `access.upgrade: "web socket"`) {
		t.Errorf("Validate: %v", err)
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}
