// Package access is peerd's destination policy (contract section 10): where
// a client's request may make peerd connect. It is Squid's default
// http_access rules made explicit: plain requests only to Safe_ports,
// CONNECT only to SSL_ports, nothing DIRECT to the proxy host itself
// (to_localhost, to_linklocal), operator-denied destinations, and only the
// Upgrade protocols the operator allows. It does no I/O: forwarding asks it
// before anything is sent, and again with each address it is about to dial.
package access

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/peerd/peerd/internal/conf"
)

// Config is the [access] section.
type Config struct {
	// SafePorts are the ports plain requests may go to (Squid Safe_ports):
	// "80" or ranges "1025-65535".
	SafePorts []PortRange `toml:"safe_ports"`
	// ConnectPorts are the ports CONNECT may go to (Squid SSL_ports).
	ConnectPorts []PortRange `toml:"connect_ports"`
	// DenyToLocal refuses DIRECT requests and tunnels to loopback,
	// link-local, unspecified and multicast addresses and to peerd's own
	// listen addresses, checked on the address dialled (so a name that
	// resolves to 127.0.0.1 is refused, and DNS rebinding does not get
	// past it). Requests sent to a parent are the parent's business.
	DenyToLocal bool `toml:"deny_to_local"`
	// DenyTo lists more destinations refused, DIRECT and via peers: CIDRs
	// (checked on literal and resolved addresses) and host names (".example.com"
	// matches the domain and every name under it).
	DenyTo []Destination `toml:"deny_to"`
	// Upgrade lists the Upgrade protocols passed through (e.g.
	// "websocket"); a request asking for another is forwarded without
	// Upgrade.
	Upgrade []string `toml:"upgrade"`
}

// DefaultConfig returns the built-in [access] defaults: Squid's.
func DefaultConfig() Config {
	return Config{
		SafePorts:    MustPorts("80", "21", "443", "70", "210", "1025-65535", "280", "488", "591", "777"),
		ConnectPorts: MustPorts("443"),
		DenyToLocal:  true,
		DenyTo:       []Destination{},
		Upgrade:      []string{},
	}
}

// Validate reports every problem, each naming its key.
func (c Config) Validate() error {
	var es conf.Errors
	for _, u := range c.Upgrade {
		if !validProtocol(u) {
			es.Addf("access", "upgrade", "%q is not a protocol name (e.g. \"websocket\")", u)
		}
	}
	return es.Err()
}

func validProtocol(u string) bool {
	return u != "" && !strings.ContainsAny(u, " \t,/") && validName(u)
}

// PortRange is an inclusive range of ports, written "80" or "1025-65535".
type PortRange struct{ Lo, Hi uint16 }

// UnmarshalText parses a port or a range.
func (r *PortRange) UnmarshalText(b []byte) error {
	lo, hi, isRange := strings.Cut(strings.TrimSpace(string(b)), "-")
	a, err1 := strconv.Atoi(lo)
	z := a
	var err2 error
	if isRange {
		z, err2 = strconv.Atoi(hi)
	}
	if err1 != nil || err2 != nil || a < 1 || z > 65535 || a > z {
		return fmt.Errorf("%q is not a port (1-65535) or a range such as \"1025-65535\"", b)
	}
	*r = PortRange{uint16(a), uint16(z)}
	return nil
}

// MarshalText prints the port or range.
func (r PortRange) MarshalText() ([]byte, error) {
	if r.Lo == r.Hi {
		return []byte(strconv.Itoa(int(r.Lo))), nil
	}
	return []byte(fmt.Sprintf("%d-%d", r.Lo, r.Hi)), nil
}

// MustPorts parses literal ports (for defaults and tests).
func MustPorts(ss ...string) []PortRange {
	out := make([]PortRange, len(ss))
	for i, s := range ss {
		if err := out[i].UnmarshalText([]byte(s)); err != nil {
			panic(err)
		}
	}
	return out
}

func inRanges(rs []PortRange, port int) bool {
	for _, r := range rs {
		if port >= int(r.Lo) && port <= int(r.Hi) {
			return true
		}
	}
	return false
}

// Destination is a deny_to entry: a CIDR (or one address), or a host name
// (".example.com" for the domain and every name under it).
type Destination struct {
	Net  netip.Prefix // valid for a network
	Name string       // lower case, for a name
}

// UnmarshalText parses a destination.
func (d *Destination) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if pr, err := netip.ParsePrefix(s); err == nil {
		*d = Destination{Net: pr.Masked()}
		return nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		*d = Destination{Net: netip.PrefixFrom(a, a.BitLen())}
		return nil
	}
	if !validName(strings.TrimPrefix(s, ".")) {
		return fmt.Errorf("%q is neither a CIDR, an address nor a host name", b)
	}
	*d = Destination{Name: strings.ToLower(s)}
	return nil
}

// MarshalText prints the destination.
func (d Destination) MarshalText() ([]byte, error) {
	if d.Net.IsValid() {
		return []byte(d.Net.String()), nil
	}
	return []byte(d.Name), nil
}

// Policy is a compiled Config. It is immutable and safe for concurrent use.
type Policy struct {
	safe, connect []PortRange
	denyLocal     bool
	denyNets      []netip.Prefix
	denyNames     []string // lower case; a leading "." matches subdomains
	upgrade       map[string]bool
	// own are peerd's listen addresses (a wildcard listener expanded to
	// the host's interface addresses by the caller).
	own []netip.AddrPort
}

// Compile checks c and builds its policy. own are peerd's own listen and
// admin addresses, refused as destinations under deny_to_local.
func Compile(c Config, own []netip.AddrPort) (*Policy, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	p := &Policy{safe: c.SafePorts, connect: c.ConnectPorts, denyLocal: c.DenyToLocal, upgrade: map[string]bool{}, own: own}
	for _, d := range c.DenyTo {
		if d.Net.IsValid() {
			p.denyNets = append(p.denyNets, d.Net)
		} else {
			p.denyNames = append(p.denyNames, d.Name)
		}
	}
	for _, u := range c.Upgrade {
		p.upgrade[strings.ToLower(u)] = true
	}
	return p, nil
}

func validName(n string) bool {
	if n == "" || len(n) > 253 {
		return false
	}
	for _, c := range n {
		if !(c == '-' || c == '.' || c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// Denied is a refusal: the rule that refused, and why, as the client's
// answer names it ("deny_to_local: 127.0.0.1 is a loopback address").
type Denied struct {
	Rule   string
	Detail string
}

func (d *Denied) Error() string { return d.Rule + ": " + d.Detail }

// CheckPort refuses a port the request may not go to: connect_ports for
// CONNECT, safe_ports for everything else.
func (p *Policy) CheckPort(connect bool, port int) error {
	if connect {
		if !inRanges(p.connect, port) {
			return &Denied{"connect_ports", fmt.Sprintf("CONNECT to port %d is not allowed", port)}
		}
		return nil
	}
	if !inRanges(p.safe, port) {
		return &Denied{"safe_ports", fmt.Sprintf("port %d is not a safe port", port)}
	}
	return nil
}

// CheckHost refuses a destination by name or literal address before any
// next hop is chosen: deny_to, whatever the route.
func (p *Policy) CheckHost(host string) error {
	if a, err := netip.ParseAddr(host); err == nil {
		return p.checkNets(a.Unmap())
	}
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	for _, n := range p.denyNames {
		if n == h || (strings.HasPrefix(n, ".") && (h == n[1:] || strings.HasSuffix(h, n))) {
			return &Denied{"deny_to", fmt.Sprintf("%s is denied", host)}
		}
	}
	return nil
}

func (p *Policy) checkNets(a netip.Addr) error {
	for _, n := range p.denyNets {
		if n.Contains(a) {
			return &Denied{"deny_to", fmt.Sprintf("%s is in %s", a, n)}
		}
	}
	return nil
}

// CheckDial refuses an address peerd is about to connect to for a DIRECT
// request or tunnel: deny_to CIDRs, and under deny_to_local the proxy
// host's own addresses. It is asked with the resolved address, just before
// the connect, so a name that resolves (or re-resolves) to 127.0.0.1 is
// refused.
func (p *Policy) CheckDial(ap netip.AddrPort) error {
	a := ap.Addr().Unmap()
	if err := p.checkNets(a); err != nil {
		return err
	}
	if !p.denyLocal {
		return nil
	}
	switch {
	case a.IsLoopback():
		return &Denied{"deny_to_local", fmt.Sprintf("%s is a loopback address", a)}
	case a.IsLinkLocalUnicast():
		return &Denied{"deny_to_local", fmt.Sprintf("%s is a link-local address", a)}
	case a.IsUnspecified():
		return &Denied{"deny_to_local", fmt.Sprintf("%s is the unspecified address", a)}
	case a.IsMulticast():
		return &Denied{"deny_to_local", fmt.Sprintf("%s is a multicast address", a)}
	}
	for _, o := range p.own {
		if o.Port() == ap.Port() && o.Addr().Unmap() == a {
			return &Denied{"deny_to_local", fmt.Sprintf("%s is one of peerd's own listen addresses", ap)}
		}
	}
	return nil
}

// HostChecks reports whether CheckHost can refuse anything.
func (p *Policy) HostChecks() bool { return len(p.denyNames) > 0 || len(p.denyNets) > 0 }

// DialChecks reports whether DIRECT dials need CheckDial at all.
func (p *Policy) DialChecks() bool { return p.denyLocal || len(p.denyNets) > 0 }

// Upgrade filters an Upgrade field value: it returns the value when every
// protocol it offers is allowed, and "" when the upgrade must be dropped.
func (p *Policy) Upgrade(value string) string {
	if len(p.upgrade) == 0 || value == "" {
		return ""
	}
	for _, proto := range strings.Split(value, ",") {
		name, _, _ := strings.Cut(strings.TrimSpace(proto), "/")
		if !p.upgrade[strings.ToLower(name)] {
			return ""
		}
	}
	return value
}
