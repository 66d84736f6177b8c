package selection

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

// hierarchy codes of the access log, by policy.
var policyCodes = [...]string{"FIRSTUP_PARENT", "ROUNDROBIN_PARENT", "WEIGHTED_ROUNDROBIN_PARENT", "CARP", "SOURCEHASH_PARENT"}

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

// Config is the [selection] section.
type Config struct {
	// Policy orders parents: first-up (default), round-robin,
	// weighted-round-robin, carp or sourcehash.
	Policy string `toml:"policy"`
}

// DefaultConfig returns the built-in [selection] defaults.
func DefaultConfig() Config { return Config{Policy: "first-up"} }

// Validate reports a problem naming its key.
func (c Config) Validate() error {
	if _, err := ParsePolicy(c.Policy); err != nil {
		return fmt.Errorf("selection.policy: %w", err)
	}
	return nil
}
