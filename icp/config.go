package icp

// This file holds the [icp] section: its keys, defaults and validation.

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/peerd/peerd/internal/conf"
)

// Config is the [icp] section (contract section 15).
type Config struct {
	// Listen is the address peerd answers ICP queries on (Squid
	// icp_port), e.g. "127.0.0.1:3130"; "" does not answer.
	Listen string `toml:"listen"`
	// QueryTimeout is how long a query waits for answers (Squid
	// icp_query_timeout); Auto is twice the mean reply time of the peers
	// asked, between MinTimeout and MaxTimeout.
	QueryTimeout Timeout `toml:"query_timeout"`
	// LogQueries writes a line to the access log for every query
	// answered, as Squid does (log_icp_queries; default on).
	LogQueries bool `toml:"log_queries"`
	// DeadPeerTimeout: a peer that used to answer and leaves queries
	// unanswered this long is marked suspect and probed (Squid
	// dead_peer_timeout).
	DeadPeerTimeout time.Duration `toml:"dead_peer_timeout"`
	// Allow are the sources (CIDRs or addresses) answered (Squid
	// icp_access); others get ICP_OP_DENIED. Empty: the [proxy] allow
	// list. A HIT tells the asker what local users fetched, so an
	// import whose http_access lets everyone in still answers ICP only
	// to whom icp_access named.
	Allow []string `toml:"allow"`
}

// Sources is Allow read as prefixes (nil when empty: [proxy] allow
// decides). Validate has checked every value.
func (c Config) Sources() []netip.Prefix {
	var out []netip.Prefix
	for _, v := range c.Allow {
		if p, err := parsePrefix(v); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// parsePrefix reads a CIDR or a single address.
func parsePrefix(v string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(v); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(v)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// DefaultConfig returns the built-in [icp] defaults.
func DefaultConfig() Config {
	return Config{QueryTimeout: Auto, LogQueries: true, DeadPeerTimeout: DeadPeerTimeout, Allow: []string{}}
}

// Bounds of the automatic query timeout (Squid icp_query_min_timeout and
// icp_query_max_timeout).
const (
	MinTimeout = 50 * time.Millisecond
	MaxTimeout = 2 * time.Second
)

// Timeout is a query timeout: a duration, or Auto.
type Timeout time.Duration

// Auto is the automatic timeout.
const Auto Timeout = 0

func (t *Timeout) UnmarshalText(b []byte) error {
	if string(b) == "auto" {
		*t = Auto
		return nil
	}
	d, err := time.ParseDuration(string(b))
	if err != nil || d <= 0 {
		return fmt.Errorf("%q is neither \"auto\" nor a positive duration", b)
	}
	*t = Timeout(d)
	return nil
}

func (t Timeout) MarshalText() ([]byte, error) {
	if t == Auto {
		return []byte("auto"), nil
	}
	return []byte(time.Duration(t).String()), nil
}

// Validate checks the section.
func (c Config) Validate() error {
	var es conf.Errors
	if c.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			es.Addf("icp", "listen", "want host:port: %v", err)
		}
	}
	if c.QueryTimeout < 0 {
		es.Addf("icp", "query_timeout", "must be \"auto\" or positive")
	}
	for i, v := range c.Allow {
		if _, err := parsePrefix(v); err != nil {
			es.Addf("icp", "allow", "[%d] %q is not an address or CIDR", i, v)
		}
	}
	if c.DeadPeerTimeout <= 0 {
		es.Addf("icp", "dead_peer_timeout", "must be positive, got %s", c.DeadPeerTimeout)
	}
	return es.Err()
}
