package peers

// This file holds the [health] section and a peer's spec: keys, defaults
// and validation.

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/peerd/peerd/internal/conf"
)

// Config is the [health] section: how connect outcomes turn into liveness and
// how dead peers are probed back to life.
type Config struct {
	// ConnectFailLimit is the number of consecutive connect failures that make
	// a peer dead (Squid's connect-fail-limit). Default 10.
	ConnectFailLimit int `toml:"connect_fail_limit"`
	// ProbeInterval is the delay between a peer's death and its first probe,
	// and the smallest delay between later probes. Default 1s.
	ProbeInterval time.Duration `toml:"probe_interval"`
	// ProbeMaxInterval caps the jittered back-off between probes. Default 5s.
	ProbeMaxInterval time.Duration `toml:"probe_max_interval"`
	// ProbeTimeout bounds one probe's connect; 0 means the peer's
	// connect_timeout.
	ProbeTimeout time.Duration `toml:"probe_timeout"`
	// IdleProbe, when positive, probes live peers that carried no traffic for
	// this long, so a peer that died while idle is found before a client
	// request is sent to it. 0 disables it.
	IdleProbe time.Duration `toml:"idle_probe"`
	// FlapWindow and FlapLimit damp flapping: a peer that died FlapLimit
	// times within FlapWindow needs FlapLimit consecutive successful
	// probes, probe_interval apart, to be revived. FlapLimit 0 is off.
	FlapWindow time.Duration `toml:"flap_window"`
	FlapLimit  int           `toml:"flap_limit"`
	// SlowStart, when positive, ramps a revived parent's share in the
	// weighted policies from 10% to 100% over this time (HAProxy
	// slowstart).
	SlowStart time.Duration `toml:"slow_start"`

	// Gray failures (contract section 16).

	// AnswerFailLimit is the number of consecutive answer failures that
	// make a parent dead; 0 turns answer failures off. Default 5.
	AnswerFailLimit int `toml:"answer_fail_limit"`
	// FirstByteTimeout: a response head not begun within this is late.
	// "auto" (default) derives it from the parent's own recent head
	// times; "0s" turns it off.
	FirstByteTimeout FirstByteTimeout `toml:"first_byte_timeout"`
	// HedgeRequests: a late idempotent request is also sent to the next
	// hop of its plan; the first response head wins. Default true.
	HedgeRequests bool `toml:"hedge_requests"`
	// MaxAnswerDead caps the share of parents answer failures may leave
	// dead at once (Envoy max_ejection_percent). Default 50%.
	MaxAnswerDead Percent `toml:"max_answer_dead"`
	// HTTPProbe is how a parent dead by answer failures is probed:
	// "options" (default), "trace", or "get URL".
	HTTPProbe HTTPProbe `toml:"http_probe"`

	// Parents judged against each other (contract section 21).

	// RelativeLatency scales each parent's share of new requests by how
	// its recent response-head times compare with the other live parents
	// of the same route and tier. Default true.
	RelativeLatency bool `toml:"relative_latency"`
	// OutlierFactor: a parent whose recent median response-head time is
	// above this many times its peers' median is suspect (cause
	// "outlier"); 0 turns it off. Default 3.
	OutlierFactor float64 `toml:"outlier_factor"`
	// HedgeBudget bounds hedged requests to this share of the requests of
	// the last 10 s (one hedge per 10 s is always allowed); "0": none.
	// Default 2%.
	HedgeBudget Budget `toml:"hedge_budget"`
	// StallGuard: when peerd itself stalls, deadlines are stretched by
	// the stall and nothing is counted against a parent for it. Default
	// true.
	StallGuard bool `toml:"stall_guard"`
}

// Budget is a share written "2%", or "0" for none.
type Budget float64

// UnmarshalText parses "N%" (0 <= N <= 100) or "0".
func (b *Budget) UnmarshalText(text []byte) error {
	if strings.TrimSpace(string(text)) == "0" {
		*b = 0
		return nil
	}
	var p Percent
	if err := p.UnmarshalText(text); err != nil {
		return fmt.Errorf(`invalid budget %q (want a percentage such as "2%%", or "0" for none)`, text)
	}
	*b = Budget(p)
	return nil
}

// MarshalText prints the share as "N%" ("0" for none).
func (b Budget) MarshalText() ([]byte, error) {
	if b == 0 {
		return []byte("0"), nil
	}
	return Percent(b).MarshalText()
}

// FirstByteTimeout is "auto" or a duration ("0s": off).
type FirstByteTimeout struct {
	Auto bool
	D    time.Duration
}

// UnmarshalText parses "auto" or a duration.
func (f *FirstByteTimeout) UnmarshalText(text []byte) error {
	if string(text) == "auto" {
		*f = FirstByteTimeout{Auto: true}
		return nil
	}
	d, err := time.ParseDuration(string(text))
	if err != nil || d < 0 {
		return fmt.Errorf(`invalid first_byte_timeout %q (want "auto", "0s" for off, or a duration such as "2s")`, text)
	}
	*f = FirstByteTimeout{D: d}
	return nil
}

// MarshalText prints "auto" or the duration.
func (f FirstByteTimeout) MarshalText() ([]byte, error) {
	if f.Auto {
		return []byte("auto"), nil
	}
	return []byte(f.D.String()), nil
}

// Percent is a share written "50%".
type Percent float64

// UnmarshalText parses "N%" with 0 <= N <= 100.
func (p *Percent) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if err != nil || !strings.HasSuffix(s, "%") || v < 0 || v > 100 {
		return fmt.Errorf(`invalid share %q (want a percentage such as "50%%")`, text)
	}
	*p = Percent(v / 100)
	return nil
}

// MarshalText prints the share as "N%".
func (p Percent) MarshalText() ([]byte, error) {
	return []byte(strconv.FormatFloat(float64(p)*100, 'f', -1, 64) + "%"), nil
}

// HTTPProbe is the kind of HTTP probe: OPTIONS or TRACE to the parent
// itself with Max-Forwards: 0, or a GET of a URL through it.
type HTTPProbe struct {
	Method string // OPTIONS, TRACE or GET
	URL    string // for GET
}

// UnmarshalText parses "options", "trace" or "get URL".
func (h *HTTPProbe) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	switch {
	case strings.EqualFold(s, "options"):
		*h = HTTPProbe{Method: "OPTIONS"}
	case strings.EqualFold(s, "trace"):
		*h = HTTPProbe{Method: "TRACE"}
	case len(s) > 4 && strings.EqualFold(s[:4], "get "):
		u, err := url.Parse(strings.TrimSpace(s[4:]))
		if err != nil || u.Host == "" || (u.Scheme != "http") || strings.ContainsAny(s[4:], "\r\n") {
			return fmt.Errorf(`invalid http_probe %q: "get" needs an absolute http URL`, text)
		}
		*h = HTTPProbe{Method: "GET", URL: u.String()}
	default:
		return fmt.Errorf(`invalid http_probe %q (want "options", "trace" or "get URL")`, text)
	}
	return nil
}

// MarshalText prints the config word.
func (h HTTPProbe) MarshalText() ([]byte, error) {
	if h.Method == "GET" {
		return []byte("get " + h.URL), nil
	}
	return []byte(strings.ToLower(h.Method)), nil
}

// DefaultConfig returns the built-in [health] defaults.
func DefaultConfig() Config {
	return Config{
		ConnectFailLimit: 10,
		ProbeInterval:    time.Second,
		ProbeMaxInterval: 5 * time.Second,
		FlapWindow:       10 * time.Minute,
		FlapLimit:        3,
		AnswerFailLimit:  5,
		FirstByteTimeout: FirstByteTimeout{Auto: true},
		HedgeRequests:    true,
		MaxAnswerDead:    0.5,
		HTTPProbe:        HTTPProbe{Method: "OPTIONS"},
		RelativeLatency:  true,
		OutlierFactor:    3,
		HedgeBudget:      0.02,
		StallGuard:       true,
	}
}

// Validate reports every problem with c, each naming its key.
func (c Config) Validate() error {
	var es conf.Errors
	bad := func(key, format string, args ...any) { es.Addf("health", key, format, args...) }
	if c.ConnectFailLimit < 1 {
		bad("connect_fail_limit", "must be at least 1, got %d", c.ConnectFailLimit)
	}
	if c.ProbeInterval <= 0 {
		bad("probe_interval", "must be positive, got %s", c.ProbeInterval)
	}
	if c.FlapLimit < 0 {
		bad("flap_limit", "must not be negative (0 turns damping off), got %d", c.FlapLimit)
	}
	if c.FlapLimit > 0 && c.FlapWindow <= 0 {
		bad("flap_window", "must be positive when flap_limit is set, got %s", c.FlapWindow)
	}
	if c.SlowStart < 0 {
		bad("slow_start", "must not be negative, got %s", c.SlowStart)
	}
	if c.ProbeMaxInterval < c.ProbeInterval {
		bad("probe_max_interval", "must be at least probe_interval (%s), got %s", c.ProbeInterval, c.ProbeMaxInterval)
	}
	if c.ProbeTimeout < 0 {
		bad("probe_timeout", "must not be negative, got %s", c.ProbeTimeout)
	}
	if c.IdleProbe < 0 {
		bad("idle_probe", "must not be negative, got %s", c.IdleProbe)
	}
	if c.AnswerFailLimit < 0 {
		bad("answer_fail_limit", "must not be negative (0 turns answer failures off), got %d", c.AnswerFailLimit)
	}
	if c.MaxAnswerDead < 0 || c.MaxAnswerDead > 1 {
		bad("max_answer_dead", "must be between 0%% and 100%%")
	}
	if c.HTTPProbe.Method == "" {
		bad("http_probe", `must be "options", "trace" or "get URL"`)
	}
	if c.OutlierFactor != 0 && (c.OutlierFactor < 1.5 || c.OutlierFactor > 100) {
		bad("outlier_factor", "must be 0 (off) or between 1.5 and 100, got %g", c.OutlierFactor)
	}
	if c.HedgeBudget < 0 || c.HedgeBudget > 1 {
		bad("hedge_budget", "must be between 0%% and 100%%")
	}
	return es.Err()
}

// Spec is one [[peer]] table: a parent or sibling proxy as configured.
// Zero values of the override fields mean "inherit"; the config loader
// rejects explicit zeros where the contract forbids them.
type Spec struct {
	// Name is unique among peers; empty means host:port.
	Name string `toml:"name"`
	Host string `toml:"host"`
	// Port is the peer's HTTP proxy port; default 3128.
	Port int `toml:"port"`
	// Type is "parent" (default) or "sibling".
	Type Type `toml:"type"`
	// Weight shapes weighted-round-robin and carp shares; default 1.
	Weight int `toml:"weight"`
	// ConnectFailLimit overrides [health] connect_fail_limit; 0 inherits.
	ConnectFailLimit int `toml:"connect_fail_limit"`
	// ConnectTimeout overrides [proxy] connect_timeout; 0 inherits.
	ConnectTimeout time.Duration `toml:"connect_timeout"`
	// MaxConn caps in-flight requests; a peer at its cap is skipped, not
	// failed. 0 means unlimited.
	MaxConn int `toml:"max_conn"`
	// Default marks a last-resort parent (Squid "default").
	Default bool `toml:"default"`
	// Login is "user:pass", sent as Proxy-Authorization to this peer only.
	// It is a secret: nothing prints it.
	Login string `toml:"login"`
	// LoginFile holds the login instead, in a file of its own (as
	// [admin] token_file).
	LoginFile string `toml:"login_file"`
	// ICPPort is the peer's ICP port (Squid cache_peer icp-port); 0: the
	// peer is not queried by ICP.
	ICPPort int `toml:"icp_port"`
	// TLS to this peer for everything: requests, CONNECT and probes
	// (Squid cache_peer ... tls); a failed handshake is a connect failure
	// of class tls. TLSCA is a PEM bundle ("" = the system roots),
	// TLSName the name verified and sent as SNI ("" = host), TLSCert and
	// TLSKey a client certificate.
	// Tier orders parents: lower tiers first; a parent of a higher tier
	// is used only when no parent of a lower tier is usable for the
	// request (HAProxy backup, DNS MX priority). Default parents stay last.
	Tier    int    `toml:"tier"`
	TLS     bool   `toml:"tls"`
	TLSCA   string `toml:"tls_ca"`
	TLSName string `toml:"tls_name"`
	TLSCert string `toml:"tls_cert"`
	TLSKey  string `toml:"tls_key"`
	// ProxyOnly: answers from this peer are relayed, never stored (Squid
	// cache_peer proxy-only), e.g. for a sibling whose cache should not
	// be copied into this one.
	ProxyOnly bool `toml:"proxy_only"`
}

// WithDefaults fills the fields whose zero value means "the default".
func (s Spec) WithDefaults() Spec {
	if s.Port == 0 {
		s.Port = 3128
	}
	if s.Weight == 0 {
		s.Weight = 1
	}
	if s.Name == "" && s.Host != "" {
		s.Name = net.JoinHostPort(s.Host, fmt.Sprint(s.Port))
	}
	return s
}

// Addr is the peer's dial address, host:port.
func (s Spec) Addr() string { return net.JoinHostPort(s.Host, fmt.Sprint(s.Port)) }

// Validate reports every problem with the index-th peer.
func (s Spec) Validate(index int) error {
	var es conf.Errors
	bad := func(key, format string, args ...any) {
		es.Add(&conf.Error{Section: "peer", Index: index, Name: s.Name, Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	if s.Name != "" && !validName(s.Name) { // an empty name is a missing host, said below
		bad("name", "%q: a peer name is 1-255 of A-Z a-z 0-9 . _ : - (and [ ] of an IPv6 address)", s.Name)
	}
	if strings.TrimSpace(s.Host) == "" {
		bad("host", "is required")
	} else if msg := hostProblem(s.Host); msg != "" {
		bad("host", "%s", msg)
	}
	if s.Port < 1 || s.Port > 65535 {
		bad("port", "must be 1-65535, got %d", s.Port)
	}
	if s.Weight < 1 {
		bad("weight", "must be at least 1, got %d", s.Weight)
	}
	if s.ConnectFailLimit < 0 {
		bad("connect_fail_limit", "must be at least 1, got %d", s.ConnectFailLimit)
	}
	if s.ConnectTimeout < 0 {
		bad("connect_timeout", "must be positive, got %s", s.ConnectTimeout)
	}
	if s.MaxConn < 0 {
		bad("max_conn", "must not be negative, got %d", s.MaxConn)
	}
	if s.ICPPort < 0 || s.ICPPort > 65535 {
		bad("icp_port", "must be 0 (no ICP) or 1-65535, got %d", s.ICPPort)
	}
	if s.Login != "" && s.Login != "PASS" && !strings.Contains(s.Login, ":") {
		bad("login", `must be "user:pass" or "PASS"`)
	}
	if s.Login != "" && s.LoginFile != "" {
		bad("login_file", "set login or login_file, not both")
	}
	if !s.TLS {
		for key, v := range map[string]string{"tls_ca": s.TLSCA, "tls_name": s.TLSName, "tls_cert": s.TLSCert, "tls_key": s.TLSKey} {
			if v != "" {
				bad(key, "needs tls = true")
			}
		}
	}
	if s.Tier < 0 {
		bad("tier", "must not be negative, got %d", s.Tier)
	}
	if (s.TLSCert == "") != (s.TLSKey == "") {
		bad("tls_cert", "tls_cert and tls_key go together")
	}
	return es.Err()
}

// validName reports whether a peer name is safe to print, log, put in a
// URL path (/peers/NAME) and a metric label: letters, digits and . _ : -,
// plus the brackets of a default name made from an IPv6 address.
func validName(n string) bool {
	if n == "" || len(n) > 255 {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("._:-[]", c) >= 0) {
			return false
		}
	}
	return true
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// hostProblem says what is wrong with a peer's host ("" for nothing): it
// is a name or an address, without a port (the HAProxy and Caddy habit
// of "10.0.0.1:3128" would be dialled as 10.0.0.1:3128:3128) and without
// brackets; a host that ends in a number is read as an IPv4 address by
// every resolver, so it must be a valid one (10.0.0.300 is not).
func hostProblem(h string) string {
	if strings.ContainsAny(h, " /\\@") || strings.IndexFunc(h, isControl) >= 0 {
		return fmt.Sprintf("%q is not a host name or address", h)
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return fmt.Sprintf("%q: an address with a zone is not supported", h)
		}
		return ""
	}
	if host, port, err := net.SplitHostPort(h); err == nil {
		if n, perr := strconv.Atoi(port); perr == nil {
			return fmt.Sprintf("%q has a port: write host = %q and port = %d", h, strings.Trim(host, "[]"), n)
		}
		return fmt.Sprintf("%q is not a host name or address (no port in host: use the port key)", h)
	}
	if strings.ContainsAny(h, ":[]") {
		return fmt.Sprintf("%q is not a host name or address (an IPv6 address is written without brackets)", h)
	}
	last := h[strings.LastIndexByte(strings.TrimSuffix(h, "."), '.')+1:]
	last = strings.TrimSuffix(last, ".")
	if last != "" && strings.TrimLeft(last, "0123456789") == "" || strings.HasPrefix(strings.ToLower(last), "0x") {
		return fmt.Sprintf("%q ends in a number but is not a valid IPv4 address (four numbers 0-255)", h)
	}
	return ""
}

// ValidateSpecs checks every peer and the set as a whole (unique names).
func ValidateSpecs(specs []Spec) error {
	var es conf.Errors
	seen := make(map[string]int, len(specs))
	for i, s := range specs {
		es.Add(s.Validate(i))
		if j, dup := seen[s.Name]; dup {
			es.Add(&conf.Error{Section: "peer", Index: i, Name: s.Name, Key: "name", Msg: fmt.Sprintf("duplicate peer name (also peer[%d])", j)})
		} else {
			seen[s.Name] = i
		}
	}
	return es.Err()
}
