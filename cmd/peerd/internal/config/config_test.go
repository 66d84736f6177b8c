package config

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/peerd/peerd/access"
	"github.com/peerd/peerd/forwarding"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
)

// TestExampleConfigMatchesDefaults keeps etc/peerd.toml honest: it decodes
// to exactly the built-in defaults plus its two example parents and the
// state file in the systemd unit's StateDirectory (the installed config
// keeps operator state; the embedded default writes no file).
func TestExampleConfigMatchesDefaults(t *testing.T) {
	src, err := os.ReadFile("../../../../etc/peerd.toml")
	if err != nil {
		t.Fatal(err)
	}
	got, ps := Parse(src)
	if len(ps) > 0 {
		t.Fatalf("etc/peerd.toml: %v", ps)
	}
	want := Default()
	want.Peers = []peers.Spec{
		{Name: "parent1", Host: "10.0.0.1", Port: 3128, Type: peers.Parent, Weight: 1},
		{Name: "parent2", Host: "10.0.0.2", Port: 3128, Type: peers.Parent, Weight: 1, ConnectTimeout: 5 * time.Second},
	}
	want.Proxy.StateFile = "/var/lib/peerd/state.json"
	netips := cmp.Options{
		cmp.Comparer(func(a, b forwarding.CIDR) bool { return a == b }),
		cmp.Comparer(func(a, b access.Destination) bool { return a == b }),
		cmpopts.IgnoreUnexported(File{}),
	}
	if diff := cmp.Diff(&want, got, netips); diff != "" {
		t.Fatalf("etc/peerd.toml differs from the built-in defaults (-want +got):\n%s", diff)
	}
}

func TestEmbeddedDefaultIsADirectProxy(t *testing.T) {
	cfg, ps := Parse(nil)
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	if cfg.Proxy.Listen != "127.0.0.1:3128" || cfg.Admin.Listen != "127.0.0.1:3180" || cfg.Proxy.Direct != selection.DirectAllow || len(cfg.Peers) != 0 {
		t.Fatalf("default = %+v", cfg)
	}
}

func TestConfigProblems(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		want []string
	}{
		{"unknown key", "[proxy]\nlisten = \"127.0.0.1:1\"\nlistne = \"x\"\n", []string{"line 3: proxy.listne: unknown key"}},
		{"unknown section", "[proxi]\nlisten = \"x\"\n", []string{"proxi: unknown key", "proxi.listen: unknown key"}},
		{"unknown peer key", "[[peer]]\nhost = \"h\"\nwieght = 2\n", []string{"line 3: peer.wieght: unknown key"}},
		{"unknown keys that are not bare", "[\"\"]\nx = 1\n[proxy]\n\"a.b\" = 1\n", []string{`"": unknown key`, `"".x: unknown key`, `line 4: proxy."a.b": unknown key`}},
		{"missing host", "[[peer]]\nname = \"a\"\nport = 1\n", []string{`line 1: peer[0] "a": host: is required`}},
		{"duplicate names", "[[peer]]\nname = \"a\"\nhost = \"h\"\n[[peer]]\nname = \"a\"\nhost = \"i\"\n", []string{`line 5: peer[1] "a": name: duplicate peer name (also peer[0])`}},
		{"bad port", "[[peer]]\nhost = \"h\"\nport = 0\n", []string{`line 3: peer[0] "h:0": port: must be 1-65535, got 0`}},
		{"explicit zero weight", "[[peer]]\nhost = \"h\"\nweight = 0\n", []string{`line 3: peer[0] "h:3128": weight: must be at least 1, got 0`}},
		{"zero fail limit", "[health]\nconnect_fail_limit = 0\n", []string{"line 2: health.connect_fail_limit: must be at least 1, got 0"}},
		{"peer zero fail limit", "[[peer]]\nhost = \"h\"\nconnect_fail_limit = 0\n", []string{`line 3: peer[0] "h:3128": connect_fail_limit: must be at least 1, got 0`}},
		{"bad duration", "[proxy]\nconnect_timeout = \"5 parsecs\"\n", []string{"line 2: proxy.connect_timeout: invalid duration"}},
		{"wrong type", "[proxy]\nforward_max_tries = \"lots\"\n", []string{"line 2", "forward_max_tries"}},
		{"bad cidr", "[proxy]\nallow = [\"10.0.0.0/33\"]\n", []string{`line 2: proxy.allow: "10.0.0.0/33" is not a CIDR`}},
		{"bad words", "[selection]\npolicy = \"random\"\n[proxy]\ndirect = \"sometimes\"\n[[peer]]\nhost = \"h\"\ntype = \"cousin\"\n",
			[]string{`line 2: selection.policy: unknown policy "random"`, `line 4: proxy.direct: unknown direct mode "sometimes"`, `line 7: peer[0] "h:3128": type: unknown peer type "cousin"`}},
		{"request_header_remove", "[proxy]\nrequest_header_remove = [\"Referer\", \"bad name\", \"host\"]\n",
			[]string{`line 2: proxy.request_header_remove: "bad name" is not a field name`, "proxy.request_header_remove: host: peerd writes this field itself"}},
		{"bad dead_peer_timeout", "[icp]\ndead_peer_timeout = \"0s\"\n", []string{"line 2: icp.dead_peer_timeout: must be positive, got 0s"}},
		{"bad outgoing_address", "[proxy]\noutgoing_address = \"0.0.0.0\"\n", []string{`line 2: proxy.outgoing_address: "0.0.0.0" is not a unicast IP address`}},
		{"bad forwarded_for", "[proxy]\nforwarded_for = \"hide\"\nvia = \"off\"\n",
			[]string{`line 2: proxy.forwarded_for: unknown mode "hide" (want on, off, transparent, delete or truncate)`, "line 3", "via"}},
		{"bad size", "[proxy]\nmax_retry_body = \"lots\"\n", []string{"line 2", "invalid size"}},
		{"overflowing size", "[proxy]\nmax_retry_body = \"99999999999999999KiB\"\n", []string{"line 2", "max_retry_body", "too large"}},
		{"size past int64", "[proxy]\nmax_retry_body = \"99999999999999999999KiB\"\n", []string{"line 2", "max_retry_body", "invalid size"}},
		{"bad level", "[log]\nlevel = \"loud\"\n", []string{`line 2: log.level: "loud" is not a level`}},
		{"syntax", "[proxy\n", []string{"line 2", "table name"}},
		{"route to an unknown peer", "[[peer]]\nhost = \"h\"\n[[route]]\ndomains = [\".a\"]\npeers = [\"h:3128\"]\n[[route]]\npeers = [\"nope\"]\n",
			[]string{`line 7: route[1].peers: "nope" is not a configured peer`}},
		{"route unknown key", "[[route]]\ndomain = [\".a\"]\n", []string{`line 2: route[0].domain: unknown key`}},
		{"route bad policy", "[[route]]\npolicy = \"dice\"\n", []string{`line 2: route[0].policy`}},
		{"rule bad action", "[[rule]]\naction = \"maybe\"\n[[rule]]\naction = \"deny\"\nsrc = [\"10.0.0.0/40\"]\n",
			[]string{`line 2: rule[0].action: must be "allow" or "deny"`, `rule[1].match:`}},
		{"rule wrong type", "[[rule]]\naction = \"deny\"\nports = 443\n", []string{`line 3: rule[0].ports: wrong type`}},
		{"peer bad tier", "[[peer]]\nhost = \"h\"\ntier = -1\n", []string{`line 3: peer[0] "h:3128": tier: must not be negative`}},
		// What an operator's first hour tripped on: values that would be
		// read as something else than meant.
		{"bare duration", "[proxy]\nconnect_timeout = 30\n", []string{`line 2: proxy.connect_timeout: want a duration such as "30s"`}},
		{"bare probe interval", "[health]\nprobe_interval = 5\n", []string{`line 2: health.probe_interval: want a duration such as "30s"`}},
		{"bare zero auto duration", "[health]\nfirst_byte_timeout = 0\n", []string{`line 2: health.first_byte_timeout: want a duration`}},
		{"bare float duration", "[proxy]\nread_timeout = 1.5\n", []string{`line 2: proxy.read_timeout: want a duration`}},
		{"bare peer duration", "[[peer]]\nhost = \"h\"\nconnect_timeout = 3\n", []string{`line 3: peer[0] "h:3128": connect_timeout: want a duration`}},
		{"bare nested duration", "[cache]\nrefresh_patterns = [{ pattern = \".\", min = 60, percent = 10, max = \"1h\" }]\n", []string{"cache.refresh_patterns: min: want a duration"}},
		{"host with a port", "[[peer]]\nhost = \"10.0.0.1:3128\"\n", []string{`line 2`, `host: "10.0.0.1:3128" has a port: write host = "10.0.0.1" and port = 3128`}},
		{"host not an address", "[[peer]]\nhost = \"10.0.0.300\"\n", []string{`line 2`, `host: "10.0.0.300" ends in a number but is not a valid IPv4 address`}},
		{"ambiguous size", "[cache]\nmemory = \"256MB\"\n", []string{`line 2: cache.memory: size "256MB" is ambiguous: write "256MiB"`}},
		// Configs that could never forward a request.
		{"direct never, no peer", "[proxy]\ndirect = \"never\"\n", []string{`line 2: proxy.direct: "never" with no peer: no request could ever be forwarded`}},
		{"direct never, siblings only", "[proxy]\ndirect = \"never\"\n[[peer]]\nhost = \"h\"\ntype = \"sibling\"\n", []string{`line 2: proxy.direct: "never" with siblings only`}},
		{"route of siblings, direct never", "[[peer]]\nname = \"p\"\nhost = \"h\"\n[[peer]]\nname = \"s\"\nhost = \"i\"\ntype = \"sibling\"\n[[route]]\ndomains = [\".a\"]\npeers = [\"s\"]\ndirect = \"never\"\n",
			[]string{`line 10: route[0].peers: siblings only, with direct "never"`}},
		// Configs that would serve nobody.
		{"allow nobody", "[proxy]\nallow = []\n", []string{`proxy.allow: []: every client would be refused`}},
		{"a first catch-all route with no way out", "[[peer]]\nname = \"p\"\nhost = \"h\"\n[[route]]\npeers = []\ndirect = \"never\"\n",
			[]string{`route[0].peers: [] with direct "never" in the first route, which has no match key`}},
		{"a first catch-all route with no way out, direct never for all", "[proxy]\ndirect = \"never\"\n[[peer]]\nname = \"p\"\nhost = \"h\"\n[[route]]\npeers = []\n",
			[]string{`route[0].peers: [] with direct "never"`}},
		// What start-up would fail on, -check finds.
		{"access log in a missing directory", "[log]\naccess_log = \"/nonexistent-peerd/access.log\"\n", []string{`line 2: log.access_log: directory /nonexistent-peerd does not exist`}},
		{"pid file in a missing directory", "[proxy]\npid_file = \"/nonexistent-peerd/peerd.pid\"\n", []string{`line 2: proxy.pid_file: directory /nonexistent-peerd does not exist`}},
		{"state file that is a directory", "[proxy]\nstate_file = \"/tmp\"\n", []string{`line 2: proxy.state_file: /tmp is a directory`}},
		{"disk store under a missing directory", "[cache]\ndisk = \"/nonexistent-peerd/cache\"\n", []string{`line 2: cache.disk: directory /nonexistent-peerd does not exist`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ps := Parse([]byte(tc.src))
			all := ps.Error()
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("Problems %q lack %q", all, w)
				}
			}
		})
	}
}

// TestWrongTypeIsReportedAlone: a value of the wrong type is one problem,
// never also a range error about the zero value it left behind.
func TestWrongTypeIsReportedAlone(t *testing.T) {
	for _, src := range []string{
		"[health]\nconnect_fail_limit = \"x\"\n",
		"[proxy]\nforward_max_tries = \"lots\"\n",
		"[[peer]]\nhost = \"h\"\nweight = \"heavy\"\n",
		"[[peer]]\nhost = \"h\"\nport = \"http\"\n",
		"[health]\nanswer_fail_limit = 1.5\n",
	} {
		_, ps := Parse([]byte(src))
		if len(ps) != 1 || !strings.Contains(ps.Error(), "wrong type") {
			t.Errorf("%q: %d problems %q; want the wrong type alone", src, len(ps), ps.Error())
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	src, _ := os.ReadFile("../../../../etc/peerd.toml")
	f.Add(string(src))
	f.Add("[[peer]]\nhost=\"h\"\nport=0\n")
	f.Add("[proxy]\nconnect_timeout = \"5 parsecs\"\n[selection]\npolicy = 3\n[nope]\nx = 1\n")
	f.Add("[[peer]]\nhost = \"a\"\nweight = 0\n[[peer]]\nname = \"a\"\nhost = \"b\"\n")
	f.Add("[access]\nsafe_ports = [\"0\"]\ndeny_to = [\"a b\"]\n")
	f.Fuzz(func(t *testing.T, s string) {
		cfg, ps := Parse([]byte(s))
		if cfg == nil && len(ps) == 0 {
			t.Fatal("no config and no Problems")
		}
		if cfg != nil && len(cfg.validate()) > 0 {
			t.Fatal("accepted an invalid config")
		}
		// Every Problem names a key, unless the file is not TOML at all.
		var any map[string]any
		if _, err := toml.Decode(s, &any); err == nil {
			for _, p := range ps {
				if p.key == "" || p.key == "?" {
					t.Fatalf("a Problem that names no key: %q", p)
				}
			}
		}
	})
}

// TestOpenProxyWarning: serving a client from anywhere without
// credentials on a non-loopback listener is warned of; a loopback
// listener, a rule that keeps sources out, or [auth] is not an open proxy.
func TestOpenProxyWarning(t *testing.T) {
	open := "[proxy]\nlisten = \"0.0.0.0:3128\"\nallow = [\"0.0.0.0/0\", \"::/0\"]\ndirect = \"allow\"\n"
	for name, tc := range map[string]struct {
		src  string
		want bool
	}{
		"every source, every address":   {open, true},
		"every source, loopback":        {strings.Replace(open, "0.0.0.0:3128", "127.0.0.1:3128", 1), false},
		"a rule lets only 10/8 in":      {open + "[[rule]]\naction = \"allow\"\nsrc = [\"10.0.0.0/8\"]\n[[rule]]\naction = \"deny\"\n", false},
		"a deny that misses passers-by": {open + "[[rule]]\naction = \"deny\"\nsrc = [\"10.0.0.0/8\"]\n", true},
		"the default allow list":        {"[proxy]\nlisten = \"0.0.0.0:3128\"\n", false},
	} {
		cfg, ps := Parse([]byte(tc.src))
		if len(ps) > 0 {
			t.Fatalf("%s: %v", name, ps)
		}
		got := strings.Contains(strings.Join(cfg.Warnings(), "\n"), "open proxy")
		if got != tc.want {
			t.Errorf("%s: open-proxy warning %v; want %v (%q)", name, got, tc.want, cfg.Warnings())
		}
	}
}

// TestDependentDefaults: a default bounded by another key follows it
// when only that key is set; set both wrong, it is still an error.
func TestDependentDefaults(t *testing.T) {
	cfg, ps := Parse([]byte("[proxy]\nshutdown_timeout = \"1s\"\n[health]\nprobe_interval = \"20s\"\n"))
	if len(ps) > 0 {
		t.Fatalf("a 1s shutdown_timeout alone: %v", ps)
	}
	if cfg.Proxy.ShutdownIdleGrace != time.Second || cfg.Health.ProbeMaxInterval != 20*time.Second {
		t.Fatalf("grace %v, probe_max_interval %v; want 1s and 20s", cfg.Proxy.ShutdownIdleGrace, cfg.Health.ProbeMaxInterval)
	}
	if _, ps := Parse([]byte("[proxy]\nshutdown_timeout = \"1s\"\nshutdown_idle_grace = \"3s\"\n")); len(ps) != 1 {
		t.Fatalf("a grace set past the timeout: %v; want one problem", ps)
	}
}
