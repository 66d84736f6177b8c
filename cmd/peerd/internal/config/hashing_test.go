package config

import (
	"testing"
)

// TestHashingJudgesOriginByOrigin: under carp or sourcehash, globally or
// in a route, parents are compared origin by origin (one client's slow
// origin moves no keys); under the other policies by their overall
// medians.
func TestHashingJudgesOriginByOrigin(t *testing.T) {
	for src, want := range map[string]bool{
		"[selection]\npolicy = \"carp\"\n":        true,
		"[selection]\npolicy = \"sourcehash\"\n":  true,
		"[selection]\npolicy = \"round-robin\"\n": false,
		"[[peer]]\nname = \"p\"\nhost = \"h\"\n[[route]]\ndomains = [\".a\"]\npeers = [\"p\"]\npolicy = \"sourcehash\"\n": true,
		"": false,
	} {
		cfg, ps := Parse([]byte(src))
		if len(ps) > 0 {
			t.Fatalf("%q: %v", src, ps)
		}
		if got := cfg.PeerOptions(nil).Matched; got != want {
			t.Errorf("%q: hashing %v; want %v", src, got, want)
		}
	}
}
