package selection

// This file holds the [selection] section and its policies.

import "fmt"

// Policy orders parents for a request.
type Policy uint8

const (
	FirstUp Policy = iota
	RoundRobin
	WeightedRoundRobin
	CARP
	SourceHash
)

var policyNames = [...]string{"first-up", "round-robin", "weighted-round-robin", "carp", "sourcehash"}

// hierarchy codes of the access log, by policy, as Squid (5.7) logs them:
// it has no code of its own for weighted-round-robin.
var policyCodes = [...]string{"FIRSTUP_PARENT", "ROUNDROBIN_PARENT", "ROUNDROBIN_PARENT", "CARP", "SOURCEHASH_PARENT"}

func (p Policy) String() string { return policyNames[p] }

// ParsePolicy maps the config word to a Policy.
func ParsePolicy(s string) (Policy, error) {
	for i, n := range policyNames {
		if n == s {
			return Policy(i), nil
		}
	}
	return 0, fmt.Errorf("unknown policy %q (want first-up, round-robin, weighted-round-robin, carp or sourcehash)", s)
}

// UnmarshalText decodes the config word, so a bad one is refused where it
// is written, with its position.
func (p *Policy) UnmarshalText(b []byte) error {
	v, err := ParsePolicy(string(b))
	if err == nil {
		*p = v
	}
	return err
}

// MarshalText encodes the config word.
func (p Policy) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// Direct says whether and when requests may go to the origin directly.
type Direct uint8

const (
	DirectAllow  Direct = iota // after all parents
	DirectNever                // never
	DirectPrefer               // before parents
	DirectAlways               // only direct
)

var directNames = [...]string{"allow", "never", "prefer", "always"}

func (d Direct) String() string { return directNames[d] }

// ParseDirect maps the config word ([proxy] direct) to a Direct.
func ParseDirect(s string) (Direct, error) {
	for i, n := range directNames {
		if n == s {
			return Direct(i), nil
		}
	}
	return 0, fmt.Errorf("unknown direct mode %q (want allow, never, prefer or always)", s)
}

// UnmarshalText decodes the config word.
func (d *Direct) UnmarshalText(b []byte) error {
	v, err := ParseDirect(string(b))
	if err == nil {
		*d = v
	}
	return err
}

// MarshalText encodes the config word.
func (d Direct) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Config is the [selection] section.
type Config struct {
	// Policy orders parents: first-up (default), round-robin,
	// weighted-round-robin, carp or sourcehash.
	Policy Policy `toml:"policy"`
}

// DefaultConfig returns the built-in [selection] defaults.
func DefaultConfig() Config { return Config{Policy: FirstUp} }

// Validate reports problems; a decoded Policy is always valid.
func (c Config) Validate() error { return nil }
