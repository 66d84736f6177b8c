// Package access is peerd's destination policy (contract section 10): where
// a client's request may make peerd connect. It is Squid's default
// http_access rules made explicit: plain requests only to Safe_ports,
// CONNECT only to SSL_ports, nothing DIRECT to the proxy host itself
// (to_localhost, to_linklocal), operator-denied destinations, and only the
// Upgrade protocols the operator allows. It does no I/O: forwarding asks it
// before anything is sent, and again with each address it is about to dial.
package access

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Config is the [access] section.
type Config struct {
	// SafePorts are the ports plain requests may go to (Squid Safe_ports):
	// "80" or ranges "1025-65535".
	SafePorts []string `toml:"safe_ports"`
	// ConnectPorts are the ports CONNECT may go to (Squid SSL_ports).
	ConnectPorts []string `toml:"connect_ports"`
	// DenyToLocal refuses DIRECT requests and tunnels to loopback,
	// link-local, unspecified and multicast addresses and to peerd's own
	// listen addresses, checked on the address dialled (so a name that
	// resolves to 127.0.0.1 is refused, and DNS rebinding does not get
	// past it). Requests sent to a parent are the parent's business.
	DenyToLocal bool `toml:"deny_to_local"`
	// DenyTo lists more destinations refused, DIRECT and via peers: CIDRs
	// (checked on literal and resolved addresses) and host names (".example.com"
	// matches the domain and every name under it).
	DenyTo []string `toml:"deny_to"`
	// Upgrade lists the Upgrade protocols passed through (e.g.
	// "websocket"); a request asking for another is forwarded without
	// Upgrade.
	Upgrade []string `toml:"upgrade"`
}

// DefaultConfig returns the built-in [access] defaults: Squid's.
func DefaultConfig() Config {
	return Config{
		SafePorts:    []string{"80", "21", "443", "70", "210", "1025-65535", "280", "488", "591", "777"},
		ConnectPorts: []string{"443"},
		DenyToLocal:  true,
		DenyTo:       []string{},
		Upgrade:      []string{},
	}
}

// Validate reports every problem, each naming its key.
func (c Config) Validate() error {
	_, err := Compile(c, nil)
	return err
}

// portRange is an inclusive range of ports.
type portRange struct{ lo, hi uint16 }

// parsePorts parses port words ("80", "1025-65535").
func parsePorts(key string, words []string) ([]portRange, []error) {
	var out []portRange
	var errs []error
	for _, w := range words {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(w), "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 1 || b > 65535 || a > b {
			errs = append(errs, fmt.Errorf("access.%s: %q is not a port (1-65535) or a range such as \"1025-65535\"", key, w))
			continue
		}
		out = append(out, portRange{uint16(a), uint16(b)})
	}
	return out, errs
}

func inRanges(rs []portRange, port int) bool {
	for _, r := range rs {
		if port >= int(r.lo) && port <= int(r.hi) {
			return true
		}
	}
	return false
}

// Policy is a compiled Config. It is immutable and safe for concurrent use.
type Policy struct {
	safe, connect []portRange
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
	var errs []error
	p := &Policy{denyLocal: c.DenyToLocal, upgrade: map[string]bool{}, own: own}
	var e []error
	p.safe, e = parsePorts("safe_ports", c.SafePorts)
	errs = append(errs, e...)
	p.connect, e = parsePorts("connect_ports", c.ConnectPorts)
	errs = append(errs, e...)
	for _, d := range c.DenyTo {
		d = strings.TrimSpace(d)
		if pr, err := netip.ParsePrefix(d); err == nil {
			p.denyNets = append(p.denyNets, pr.Masked())
			continue
		}
		if a, err := netip.ParseAddr(d); err == nil {
			p.denyNets = append(p.denyNets, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		if !validName(strings.TrimPrefix(d, ".")) {
			errs = append(errs, fmt.Errorf("access.deny_to: %q is neither a CIDR, an address nor a host name", d))
			continue
		}
		p.denyNames = append(p.denyNames, strings.ToLower(d))
	}
	for _, u := range c.Upgrade {
		u = strings.TrimSpace(u)
		if u == "" || strings.ContainsAny(u, " ,/") {
			errs = append(errs, fmt.Errorf("access.upgrade: %q is not a protocol name (e.g. \"websocket\")", u))
			continue
		}
		p.upgrade[strings.ToLower(u)] = true
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
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
