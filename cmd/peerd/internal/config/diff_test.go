package config

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/peerd/peerd/admin"
	"github.com/peerd/peerd/peers"
)

func TestReloadDiff(t *testing.T) {
	old := Default()
	old.Peers = []peers.Spec{
		{Name: "p1", Host: "10.0.0.1", Port: 3128},
		{Name: "p2", Host: "10.0.0.2", Port: 3128},
		{Name: "p3", Host: "10.0.0.3", Port: 3128},
	}
	cfg := Default()
	cfg.Peers = []peers.Spec{
		{Name: "p1", Host: "10.0.0.1", Port: 3128, Weight: 5},
		{Name: "p2", Host: "10.0.0.2", Port: 3128},
		{Name: "p3", Host: "10.0.0.9", Port: 3128},
		{Name: "p4", Host: "10.0.0.4", Port: 3128},
	}
	cfg.Proxy.ConnectTimeout = 5 * time.Second
	cfg.Health.FlapLimit = 0
	got := ReloadDiff(&old, &cfg)
	want := admin.ReloadDiff{
		Kept: []string{"p1", "p2"}, Added: []string{"p4"}, Removed: []string{},
		Changed:  []admin.PeerChange{{Peer: "p1", Fields: []string{"weight"}}, {Peer: "p3", Fields: []string{"host"}}},
		Settings: []string{"health.flap_limit", "proxy.connect_timeout"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("reload diff (-want +got):\n%s", d)
	}
	same := ReloadDiff(&cfg, &cfg)
	if len(same.Changed)+len(same.Settings)+len(same.Added)+len(same.Removed) != 0 || len(same.Kept) != 4 {
		t.Fatalf("a reload of the same file: %+v", same)
	}
}

// TestReloadDiffRuleMovedIsNoChange: a comment added above the rules moves
// them down a line (their refusals name the new line) but changes no rule.
func TestReloadDiffRuleMovedIsNoChange(t *testing.T) {
	body := "[[peer]]\nname = \"p\"\nhost = \"10.0.0.1\"\nport = 3128\n[[rule]]\naction = \"deny\"\ndomains = [\".x.test\"]\n"
	old, ps := Parse([]byte(body))
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	moved, ps := Parse([]byte("# a comment\n" + body))
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	if old.Rules[0].Line == moved.Rules[0].Line {
		t.Fatal("the rule did not move")
	}
	if d := ReloadDiff(old, moved); len(d.Settings) != 0 {
		t.Fatalf("a rule moved down a line: settings %v changed; want none", d.Settings)
	}
	moved.Rules[0].Action = "allow"
	if d := ReloadDiff(old, moved); len(d.Settings) != 1 || d.Settings[0] != "rule" {
		t.Fatalf("a rule changed: settings %v; want [rule]", d.Settings)
	}
}
