package forwarding

// This file holds the [proxy] section: its keys, defaults and validation.

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/peerd/peerd/internal/conf"
	"github.com/peerd/peerd/internal/h1"
	"github.com/peerd/peerd/selection"
)

// Config is the [proxy] section.
type Config struct {
	// Listen is the proxy's address (Squid http_port).
	Listen string `toml:"listen"`
	// Name is used in Via and for loop detection (visible_hostname); ""
	// means the machine's host name.
	Name string `toml:"name"`
	// Allow lists the client CIDRs served; anyone else gets 403.
	Allow []CIDR `toml:"allow"`
	// ForwardMaxTries caps attempts per request across hops.
	ForwardMaxTries int `toml:"forward_max_tries"`
	// ConnectTimeout is the default connect timeout for peers and DIRECT.
	ConnectTimeout time.Duration `toml:"connect_timeout"`
	// ReadTimeout ends a request when the next hop sends nothing this long.
	ReadTimeout time.Duration `toml:"read_timeout"`
	// ShutdownTimeout bounds the wait for in-flight requests on stop.
	ShutdownTimeout time.Duration `toml:"shutdown_timeout"`
	// ShutdownIdleGrace is how long, at a stop or a binary upgrade, an
	// idle keep-alive client connection is kept for its next request
	// (answered with Connection: close) before it is closed: closing it
	// at once would fail a request its client is sending on it.
	ShutdownIdleGrace time.Duration `toml:"shutdown_idle_grace"`
	// Direct is allow, never, prefer or always.
	Direct selection.Direct `toml:"direct"`
	// RetryOnStatus lists next-hop statuses that make an idempotent
	// request try the next hop.
	RetryOnStatus []int `toml:"retry_on_status"`
	// MaxRetryBody is the largest request body buffered for a retry.
	MaxRetryBody ByteSize `toml:"max_retry_body"`
	// RetryBudget is the share of requests that after-write and status
	// retries may add (at least 10 per second).
	RetryBudget float64 `toml:"retry_budget"`
	// PconnTimeout closes idle keep-alive connections to next hops.
	PconnTimeout time.Duration `toml:"pconn_timeout"`
	// ConnectHedgeDelay: "auto", or a duration ("0s" turns hedging off).
	ConnectHedgeDelay HedgeDelay `toml:"connect_hedge_delay"`
	// RequestTimeout: a request head must arrive whole within this after
	// its first byte (Squid request_timeout); slower clients get 408.
	RequestTimeout time.Duration `toml:"request_timeout"`
	// ClientIdleTimeout closes idle keep-alive client connections (Squid
	// client_idle_pconn_timeout).
	ClientIdleTimeout time.Duration `toml:"client_idle_timeout"`
	// WriteTimeout cuts a client that accepts no response bytes for this
	// long (Squid write_timeout).
	WriteTimeout time.Duration `toml:"write_timeout"`
	// MaxHeaderSize bounds request heads (431 beyond it) and response heads
	// from next hops (a broken response beyond it).
	MaxHeaderSize ByteSize `toml:"max_header_size"`
	// MaxConnections caps open client connections; more are closed at once
	// and counted.
	MaxConnections int `toml:"max_connections"`
	// MaxConnectionsPerSource caps the open connections of one client
	// address (Squid client_ip_max_connections), so that one host cannot
	// take all of max_connections.
	MaxConnectionsPerSource int `toml:"max_connections_per_source"`
	// RequestStartTimeout: a new connection's first request byte must
	// arrive within this (Squid request_start_timeout); far shorter than
	// client_idle_timeout, so idle sockets opened to hold slots go soon.
	RequestStartTimeout time.Duration `toml:"request_start_timeout"`
	// PIDFile, when set, names the process that serves (Squid
	// pid_filename); after a binary upgrade (SIGUSR2) it names the new
	// one, so systemd's PIDFile follows it.
	PIDFile string `toml:"pid_file"`
	// StateFile, when set, keeps operator state across restarts: admin
	// overrides (reason, ttl), each peer's history and flap state, and
	// learned connect and response-head times.
	StateFile string `toml:"state_file"`
	// TLSListen, when set, is a TLS listener for clients (Squid
	// https_port, a "secure web proxy") with TLSCert and TLSKey (PEM),
	// re-read on reload.
	TLSListen string `toml:"tls_listen"`
	TLSCert   string `toml:"tls_cert"`
	TLSKey    string `toml:"tls_key"`
	// ForwardedFor is what X-Forwarded-For tells the next hop of the
	// client, in Squid's forwarded_for words: "on" appends its address,
	// "off" appends "unknown", "transparent" passes the client's own field
	// unchanged, "delete" sends none, "truncate" sends only its address.
	ForwardedFor string `toml:"forwarded_for"`
	// Via: false stops peerd adding its own Via entry to requests and
	// answers (Squid via off). The client's and the next hop's entries
	// still pass, but a loop through peerd can then no longer be seen.
	Via bool `toml:"via"`
	// RequestHeaderRemove names request fields never sent to a next hop
	// (Squid "request_header_access NAME deny all"), e.g. Referer or
	// User-Agent for an anonymising proxy. "Via" and "X-Forwarded-For"
	// take peerd's own entries with them. Fields that frame or route the
	// request cannot be named.
	RequestHeaderRemove []string `toml:"request_header_remove"`
	// OutgoingAddress is the local IP address connections to peers and
	// origins are made from (Squid tcp_outgoing_address), e.g. on a host
	// whose parents let in one address only; "" leaves it to the kernel.
	// It is used for destinations of its own family only.
	OutgoingAddress string `toml:"outgoing_address"`
}

// DefaultConfig returns the built-in [proxy] defaults.
func DefaultConfig() Config {
	return Config{
		Listen:            "127.0.0.1:3128",
		Name:              "",
		Allow:             MustCIDRs("127.0.0.0/8", "::1/128", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"),
		ForwardMaxTries:   25,
		ConnectTimeout:    30 * time.Second,
		ReadTimeout:       15 * time.Minute,
		ShutdownTimeout:   30 * time.Second,
		ShutdownIdleGrace: 2 * time.Second,
		Direct:            selection.DirectAllow,
		RetryOnStatus:     []int{502, 504},
		MaxRetryBody:      64 << 10,
		RetryBudget:       0.2,
		PconnTimeout:      time.Minute,
		ConnectHedgeDelay: HedgeDelay{Auto: true},
		RequestTimeout:    time.Minute,
		ClientIdleTimeout: 2 * time.Minute,
		WriteTimeout:      15 * time.Minute,
		MaxHeaderSize:     64 << 10,
		MaxConnections:    16384,

		MaxConnectionsPerSource: 1024,
		RequestStartTimeout:     10 * time.Second,
		ForwardedFor:            "on",
		Via:                     true,
		RequestHeaderRemove:     []string{},
	}
}

// Validate reports every problem, each naming its key.
func (c Config) Validate() error {
	var es conf.Errors
	bad := func(key, format string, args ...any) { es.Addf("proxy", key, format, args...) }
	if _, err := netip.ParseAddrPort(c.Listen); err != nil {
		bad("listen", "%q is not an ip:port address: %v", c.Listen, err)
	}
	if c.Name != "" && (strings.TrimSpace(c.Name) == "" || strings.ContainsAny(c.Name, " \t,()")) {
		bad("name", "%q must be a token without spaces, commas or parentheses (or \"\" for the host name)", c.Name)
	}
	if c.ForwardMaxTries < 1 {
		bad("forward_max_tries", "must be at least 1, got %d", c.ForwardMaxTries)
	}
	for _, d := range []struct {
		key string
		d   time.Duration
	}{{"connect_timeout", c.ConnectTimeout}, {"read_timeout", c.ReadTimeout}, {"shutdown_timeout", c.ShutdownTimeout},
		{"pconn_timeout", c.PconnTimeout}, {"request_timeout", c.RequestTimeout}, {"client_idle_timeout", c.ClientIdleTimeout},
		{"write_timeout", c.WriteTimeout}, {"request_start_timeout", c.RequestStartTimeout}} {
		if d.d <= 0 {
			bad(d.key, "must be positive, got %s", d.d)
		}
	}
	if c.ShutdownIdleGrace < 0 || c.ShutdownIdleGrace > c.ShutdownTimeout {
		bad("shutdown_idle_grace", "must be between 0s and shutdown_timeout (%s), got %s", c.ShutdownTimeout, c.ShutdownIdleGrace)
	}
	if c.MaxHeaderSize < 1<<10 || c.MaxHeaderSize > 16<<20 {
		bad("max_header_size", "must be between 1KiB and 16MiB, got %d bytes", int64(c.MaxHeaderSize))
	}
	if c.MaxConnections < 1 {
		bad("max_connections", "must be at least 1, got %d", c.MaxConnections)
	}
	if c.TLSListen != "" {
		if _, err := netip.ParseAddrPort(c.TLSListen); err != nil {
			bad("tls_listen", "%q is not an ip:port address: %v", c.TLSListen, err)
		}
		if c.TLSCert == "" || c.TLSKey == "" {
			bad("tls_cert", "tls_listen needs tls_cert and tls_key")
		}
	}
	if c.MaxConnectionsPerSource < 1 {
		bad("max_connections_per_source", "must be at least 1, got %d", c.MaxConnectionsPerSource)
	}
	for _, s := range c.RetryOnStatus {
		if s < 100 || s > 599 {
			bad("retry_on_status", "%d is not an HTTP status", s)
		}
	}
	if c.MaxRetryBody < 0 {
		bad("max_retry_body", "must not be negative")
	}
	if c.RetryBudget < 0 || c.RetryBudget > 1 {
		bad("retry_budget", "must be between 0 and 1, got %g", c.RetryBudget)
	}
	if !c.ConnectHedgeDelay.Auto && c.ConnectHedgeDelay.Delay < 0 {
		bad("connect_hedge_delay", "must not be negative")
	}
	for _, name := range c.RequestHeaderRemove {
		switch {
		case !h1.IsToken(name):
			bad("request_header_remove", "%q is not a field name", name)
		case managedFields[strings.ToLower(name)]:
			bad("request_header_remove", "%s: peerd writes this field itself, to frame or route the request", name)
		}
	}
	if c.OutgoingAddress != "" {
		if a, err := netip.ParseAddr(c.OutgoingAddress); err != nil || a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() {
			bad("outgoing_address", "%q is not a unicast IP address of this host (e.g. \"10.0.0.5\")", c.OutgoingAddress)
		}
	}
	if _, ok := xffModes[c.ForwardedFor]; !ok {
		bad("forwarded_for", "unknown mode %q (want on, off, transparent, delete or truncate)", c.ForwardedFor)
	}
	return es.Err()
}

// CheckOutgoingAddress is the part of the [proxy] check that asks this
// host (Validate stays pure; -check, start-up and reloads run both): it reports
// an outgoing_address this host cannot send from (not one of its
// addresses), from which every connect would fail and be counted against
// the peers.
func CheckOutgoingAddress(a string) error {
	if a == "" {
		return nil
	}
	l, err := net.ListenPacket("udp", net.JoinHostPort(a, "0"))
	if err != nil {
		return &conf.Error{Section: "proxy", Key: "outgoing_address", Msg: fmt.Sprintf("%s is not an address of this host: %v", a, err)}
	}
	return l.Close()
}

// managedFields are the request fields request_header_remove cannot name:
// peerd writes them from what it parsed, and without them the next hop
// could not frame or route the request (or would get no credentials).
var managedFields = map[string]bool{
	"host": true, "content-length": true, "transfer-encoding": true, "connection": true,
	"upgrade": true, "te": true, "trailer": true, "keep-alive": true, "proxy-connection": true,
	"proxy-authorization": true, "max-forwards": true,
}

// CIDR is a client network of [proxy] allow, written "10.0.0.0/8".
type CIDR netip.Prefix

// UnmarshalText parses a CIDR; the address is masked to the network.
func (c *CIDR) UnmarshalText(b []byte) error {
	p, err := netip.ParsePrefix(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a CIDR (e.g. 10.0.0.0/8)", b)
	}
	*c = CIDR(p.Masked())
	return nil
}

// MarshalText prints the CIDR.
func (c CIDR) MarshalText() ([]byte, error) { return []byte(netip.Prefix(c).String()), nil }

// MustCIDRs parses literal CIDRs (for defaults and tests).
func MustCIDRs(ss ...string) []CIDR {
	out := make([]CIDR, len(ss))
	for i, s := range ss {
		if err := out[i].UnmarshalText([]byte(s)); err != nil {
			panic(err)
		}
	}
	return out
}

// ByteSize is a size in bytes, written in TOML as "64KiB", "1MiB", "512".
type ByteSize = conf.ByteSize

// HedgeDelay is "auto" or a duration.
type HedgeDelay struct {
	Auto  bool
	Delay time.Duration
}

// UnmarshalText parses "auto" or a Go duration.
func (h *HedgeDelay) UnmarshalText(text []byte) error {
	if string(text) == "auto" {
		*h = HedgeDelay{Auto: true}
		return nil
	}
	d, err := time.ParseDuration(string(text))
	if err != nil {
		return fmt.Errorf(`invalid hedge delay %q (want "auto" or a duration such as "100ms")`, string(text))
	}
	*h = HedgeDelay{Delay: d}
	return nil
}

// MarshalText prints "auto" or the duration.
func (h HedgeDelay) MarshalText() ([]byte, error) {
	if h.Auto {
		return []byte("auto"), nil
	}
	return []byte(h.Delay.String()), nil
}
