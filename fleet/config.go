package fleet

// This file holds the [fleet] section: its keys, defaults and validation.

import (
	"encoding/base64"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/peerd/peerd/internal/conf"
	"github.com/peerd/peerd/peers"
)

// Config is the [fleet] section (contract section 14).
type Config struct {
	// Bind is the gossip address ("10.0.0.5:7946"); "" turns the fleet
	// off. UDP and TCP on the same port.
	Bind string `toml:"bind"`
	// Join lists other members' gossip addresses. Joining is retried in
	// the background, with back-off, until one of them answers, and again
	// whenever this member is left alone.
	Join []string `toml:"join"`
	// Key is a base64 16, 24 or 32-byte key (AES-128/192/256-GCM): gossip
	// is encrypted and authenticated with it. Required unless Bind is a
	// loopback address.
	Key string `toml:"key"`
	// KeyFile holds the key instead, in a file of its own (as
	// [admin] token_file).
	KeyFile string `toml:"key_file"`
	// Node is this member's name; "" is the [proxy] name.
	Node string `toml:"node"`
	// PurgeLog is how long purges are kept and replayed to a member that
	// joins or rejoins (contract section 20); 0 keeps none.
	PurgeLog time.Duration `toml:"purge_log"`
	// SharedCache makes the members one cache: each cache key has one
	// owner, which alone fetches it from the next hops (contract section
	// 20).
	SharedCache bool `toml:"shared_cache"`
	// HTTPAddr is the address other members reach this one's proxy port
	// on; "" is the proxy listener's port at the gossip host.
	HTTPAddr string `toml:"http_addr"`
	// MaxLoad bounds a member's in-flight owner fetches to this times the
	// fleet's average: one over it is skipped for new keys.
	MaxLoad float64 `toml:"max_load"`
	// HotCopies is the share of objects fetched through their owner that
	// a member keeps a copy of.
	HotCopies peers.Budget `toml:"hot_copies"`
}

// DefaultConfig returns the built-in [fleet] defaults: off.
func DefaultConfig() Config {
	return Config{Join: []string{}, PurgeLog: 10 * time.Minute, MaxLoad: 1.25, HotCopies: 0.1}
}

// Enabled reports whether this peerd gossips.
func (c Config) Enabled() bool { return c.Bind != "" }

// Validate checks the section.
func (c Config) Validate() error {
	var es conf.Errors
	if c.Bind != "" {
		host, _, err := splitAddr(c.Bind)
		switch {
		case err != nil:
			es.Addf("fleet", "bind", "%v", err)
		case c.Key == "" && c.KeyFile == "" && !isLoopback(host):
			es.Addf("fleet", "key", "is required when bind (%s) is not a loopback address: gossip carries peer verdicts and must be authenticated", c.Bind)
		}
	}
	if c.Key != "" {
		if _, err := c.secret(); err != nil {
			es.Addf("fleet", "key", "%v", err)
		}
	}
	if c.Key != "" && c.KeyFile != "" {
		es.Addf("fleet", "key_file", "set key or key_file, not both")
	}
	if c.SharedCache && c.Bind == "" {
		es.Addf("fleet", "shared_cache", "needs bind: the members find each other by gossip")
	}
	if c.HTTPAddr != "" {
		if host, port, err := splitAddr(c.HTTPAddr); err != nil || host == "" || port == 0 {
			es.Addf("fleet", "http_addr", "%q: want the host:port other members reach this one's proxy port on", c.HTTPAddr)
		}
	}
	if (c.SharedCache || c.MaxLoad != 0) && (c.MaxLoad < 1 || c.MaxLoad > 10) {
		es.Addf("fleet", "max_load", "must be between 1 and 10 (times the fleet's average load), got %g", c.MaxLoad)
	}
	if c.PurgeLog < 0 || c.PurgeLog > 24*time.Hour {
		es.Addf("fleet", "purge_log", "must be between 0s (keep none) and 24h, got %s", c.PurgeLog)
	}
	for _, j := range c.Join {
		if _, _, err := splitAddr(j); err != nil {
			es.Addf("fleet", "join", "%q: %v", j, err)
		}
	}
	return es.Err()
}

// CheckKey reports what is wrong with a key (as read from key_file).
func CheckKey(key string) error {
	_, err := Config{Key: key}.secret()
	return err
}

// secret decodes Key.
func (c Config) secret() ([]byte, error) {
	if c.Key == "" {
		return nil, nil
	}
	b, err := base64.StdEncoding.DecodeString(c.Key)
	if err != nil {
		return nil, fmt.Errorf("not base64: %v", err)
	}
	switch len(b) {
	case 16, 24, 32:
		return b, nil
	}
	return nil, fmt.Errorf("decodes to %d bytes; want 16, 24 or 32 (e.g. the output of `head -c 32 /dev/urandom | base64`)", len(b))
}

// splitAddr parses "host:port" with a numeric port.
func splitAddr(a string) (string, int, error) {
	host, ps, err := net.SplitHostPort(a)
	if err != nil {
		return "", 0, fmt.Errorf("want host:port: %v", err)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", ps)
	}
	return host, port, nil
}

// isLoopback reports whether host is a loopback address or localhost:
// gossip that never leaves the machine may go without a key.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
