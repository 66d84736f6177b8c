package squidimport

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/peerd/peerd/cmd/peerd/internal/config"
	"github.com/peerd/peerd/icp"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
)

// TestImportSquidCorpus: every squid.conf of the corpus converts to a
// config that passes the checks, and its peers, policy and direct setting
// are what Squid would use.
func TestImportSquidCorpus(t *testing.T) {
	type peer struct {
		name, host string
		port       int
		typ        peers.Type
		weight     int
	}
	cases := []struct {
		file    string
		policy  selection.Policy
		direct  selection.Direct
		peers   []peer
		notes   []string // substrings of what is not carried over
		check   func(t *testing.T, c *config.File)
		refused string
	}{
		{file: "rr-equal.conf", policy: selection.RoundRobin, direct: selection.DirectNever,
			peers: []peer{{"p1", "10.0.0.1", 3128, peers.Parent, 1}, {"p2", "10.0.0.2", 3128, peers.Parent, 1}, {"p3", "10.0.0.3", 8080, peers.Parent, 1}},
			check: func(t *testing.T, c *config.File) {
				if c.Proxy.Listen != "0.0.0.0:3128" || c.Proxy.Name != "child1.example.net" {
					t.Errorf("listen %q name %q", c.Proxy.Listen, c.Proxy.Name)
				}
			}},
		{file: "rr-weighted.conf", policy: selection.WeightedRoundRobin, direct: selection.DirectNever,
			peers: []peer{{"big.example.net", "big.example.net", 3128, peers.Parent, 3}, {"small1.example.net", "small1.example.net", 3128, peers.Parent, 1}, {"small2.example.net", "small2.example.net", 3128, peers.Parent, 1}},
			check: func(t *testing.T, c *config.File) {
				if c.Proxy.Listen != "127.0.0.1:3129" {
					t.Errorf("listen %q", c.Proxy.Listen)
				}
			}},
		{file: "carp.conf", policy: selection.CARP, direct: selection.DirectPrefer,
			peers: []peer{{"c1", "192.0.2.10", 3128, peers.Parent, 2}, {"c2", "192.0.2.11", 3128, peers.Parent, 1}, {"c3", "192.0.2.12", 3128, peers.Parent, 1}}},
		{file: "sourcehash.conf", policy: selection.SourceHash, direct: selection.DirectNever,
			peers: []peer{{"h1", "10.1.0.1", 3128, peers.Parent, 1}, {"h2", "10.1.0.2", 3128, peers.Parent, 1}}},
		{file: "hierarchy.conf", policy: selection.FirstUp, direct: selection.DirectNever,
			peers: []peer{{"sib1", "sib1.example.net", 3128, peers.Sibling, 1}, {"sib2", "sib2.example.net", 3128, peers.Sibling, 1}, {"up1", "up1.example.net", 3128, peers.Parent, 1}, {"up2", "up2.example.net", 3128, peers.Parent, 1}},
			check: func(t *testing.T, c *config.File) {
				up1, up2, sib := c.Peers[2], c.Peers[3], c.Peers[0]
				if !sib.ProxyOnly || up1.ProxyOnly {
					t.Errorf("proxy_only sib1 %v up1 %v; want sib1's proxy-only carried over, and only it", sib.ProxyOnly, up1.ProxyOnly)
				}
				if up1.ConnectFailLimit != 5 || up1.MaxConn != 200 || up1.ConnectTimeout != 3*time.Second || up1.Login != "child:s3cret" {
					t.Errorf("up1 = %+v", up1)
				}
				if !up2.Default || up2.ConnectTimeout != 5*time.Second || sib.ConnectTimeout != 5*time.Second {
					t.Errorf("up2 = %+v sib1 = %+v; want default and peer_connect_timeout 5s", up2, sib)
				}
				if c.Proxy.ConnectTimeout != time.Minute || c.Proxy.ForwardMaxTries != 10 || c.Proxy.PconnTimeout != 2*time.Minute || c.Proxy.Name != "edge7" {
					t.Errorf("proxy = %+v", c.Proxy)
				}
				if c.Cache.Memory != 512<<20 || c.Cache.MaxObject != 8<<20 {
					t.Errorf("cache = %+v", c.Cache)
				}
				// sib1 is asked by ICP; sib2 and the parents are no-query.
				if sib.ICPPort != 3130 || c.Peers[1].ICPPort != 0 || up1.ICPPort != 0 {
					t.Errorf("icp ports sib1=%d sib2=%d up1=%d; want 3130, 0, 0", sib.ICPPort, c.Peers[1].ICPPort, up1.ICPPort)
				}
				if c.ICP.Listen != "0.0.0.0:3130" || c.ICP.QueryTimeout != icp.Timeout(800*time.Millisecond) || fmt.Sprint(c.ICP.Allow) != "[10.0.0.0/8]" {
					t.Errorf("icp = %+v; want listen 0.0.0.0:3130, query_timeout 800ms, allow [10.0.0.0/8]", c.ICP)
				}
			}},
		{file: "wrr.conf", policy: selection.WeightedRoundRobin, direct: selection.DirectAllow,
			peers: []peer{{"w1", "10.2.0.1", 3128, peers.Parent, 2}, {"w2", "10.2.0.2", 3128, peers.Parent, 1}},
			notes: []string{"ICP round-trip time"}},
		{file: "firstup.conf", policy: selection.FirstUp, direct: selection.DirectAlways,
			peers: []peer{{"primary.example.net", "primary.example.net", 3128, peers.Parent, 1}, {"backup.example.net", "backup.example.net", 3128, peers.Parent, 1}}},
		{file: "unsupported.conf", policy: selection.FirstUp, direct: selection.DirectAllow,
			peers: []peer{{"only", "10.3.0.1", 3128, peers.Parent, 1}},
			notes: []string{"background-ping"},
			check: func(t *testing.T, c *config.File) {
				if c.Peers[0].Login != "PASS" || !c.Peers[0].TLS {
					t.Errorf("login=PASSTHRU ssl: login %q tls %v; want PASS (the client's credentials as they came) over TLS", c.Peers[0].Login, c.Peers[0].TLS)
				}
				// Squid's spool is never peerd's store: the size carries over.
				if c.Cache.Disk != peerdDisk || c.Cache.DiskSize != 100<<20 {
					t.Errorf("cache_dir ufs /var/spool/squid 100: disk %q disk_size %v; want %s, 100 MiB", c.Cache.Disk, c.Cache.DiskSize, peerdDisk)
				}
				if c.Cache.HeuristicPercent != 20 || c.Cache.HeuristicMax != 4320*time.Minute {
					t.Errorf("refresh_pattern . 0 20%% 4320: heuristic %d%% max %v", c.Cache.HeuristicPercent, c.Cache.HeuristicMax)
				}
				if len(c.Rules) != 2 || c.Rules[0].Action != "allow" || fmt.Sprint(c.Rules[0].Src) != "[10.0.0.0/8]" || c.Rules[1].Action != "deny" {
					t.Errorf("rules = %+v; want allow 10.0.0.0/8, then deny", c.Rules)
				}
				if len(c.Routes) != 1 || c.Routes[0].Direct != "always" || len(c.Routes[0].Peers) != 0 {
					t.Errorf("routes = %+v; want always_direct for localnet", c.Routes)
				}
			}},
		{file: "originserver.conf", refused: "originserver"},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", "squid", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			out, notes, err := importSquid(f)
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("err %v; want a refusal naming %s", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "peerd.toml")
			os.WriteFile(path, []byte(out), 0o644)
			cfg, ps := config.Load(path)
			if len(ps) > 0 {
				t.Fatalf("the output does not pass -check: %v\n%s", ps, out)
			}
			if cfg.Selection.Policy != tc.policy || cfg.Proxy.Direct != tc.direct {
				t.Errorf("policy %v direct %v; want %v %v", cfg.Selection.Policy, cfg.Proxy.Direct, tc.policy, tc.direct)
			}
			if len(cfg.Peers) != len(tc.peers) {
				t.Fatalf("%d peers; want %d\n%s", len(cfg.Peers), len(tc.peers), out)
			}
			for i, w := range tc.peers {
				g := cfg.Peers[i].WithDefaults()
				if g.Name != w.name || g.Host != w.host || g.Port != w.port || g.Type != w.typ || g.Weight != w.weight {
					t.Errorf("peer %d = %s %s:%d %v w%d; want %+v", i, g.Name, g.Host, g.Port, g.Type, g.Weight, w)
				}
			}
			all := strings.Join(notes, "\n")
			for _, n := range tc.notes {
				if !strings.Contains(all, n) {
					t.Errorf("not carried over lacks %q:\n%s", n, all)
				}
				if !strings.Contains(out, n) {
					t.Errorf("the output's comments lack %q", n)
				}
			}
			if tc.check != nil {
				tc.check(t, cfg)
			}
		})
	}
}

// FuzzImportSquid: whatever a squid.conf holds, the importer either
// refuses it with a line-numbered error or prints a config that passes
// -check.
func FuzzImportSquid(f *testing.F) {
	entries, _ := os.ReadDir(filepath.Join("testdata", "squid"))
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join("testdata", "squid", e.Name()))
		f.Add(string(b), "")
	}
	f.Add("cache_peer a parent 1 0 weight=0 name=\"x\"\ncache_peer b sibling 65535 65535 connect-timeout=0.5 max-conn=-1", "")
	f.Add("http_port [::1]:3128\ncache_mem 0 bytes\nforward_max_tries 0", "")
	f.Add("tcp_outgoing_address\ntcp_outgoing_address 10.0.0.1 all\ndead_peer_timeout\nquick_abort_pct\ncache\nrequest_header_access\nminimum_object_size\nvia\nforwarded_for\npid_filename", "")
	f.Add("read_timeout 0.5 minutes\nshutdown_lifetime 0\nforwarded_for truncate\nvia off\npid_filename none\ncollapsed_forwarding off\ncache deny all\ncache_dir ufs /c 10 16 256\nrequest_header_access Referer deny all\nrequest_header_access Host deny all\nrequest_header_access \"x y\" deny all", "")
	f.Add("include inc.conf\nhttp_access allow all\n", "acl x src 10.0.0.0/8\nhttp_access deny x\ninclude *.conf\n")
	f.Add("include *.conf inc.conf\n", "include squid.conf\n")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, conf, inc string) {
		// The file includes only inc.conf (whatever it names), from memory.
		_, out, err := convertFrom(memFiles{"inc.conf": inc}, "squid.conf", strings.NewReader(conf))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "line ") && !strings.HasPrefix(err.Error(), "the converted config") {
				t.Fatalf("an error that names neither a line nor the check: %v", err)
			}
			return
		}
		path := filepath.Join(dir, "out.toml")
		os.WriteFile(path, []byte(out), 0o644)
		if _, ps := config.ParseFiles([]byte(out), false); len(ps) > 0 { // (the files it names are another machine's)
			t.Fatalf("import of\n%s\nprints a config -check refuses: %v\n%s", conf, ps, out)
		}
	})
}

// memFiles is a source of files held in memory, by name (a glob matches
// their names).
type memFiles map[string]string

func (m memFiles) Open(name string) (io.ReadCloser, error) {
	if v, ok := m[filepath.Base(name)]; ok && filepath.Dir(name) == "." {
		return io.NopCloser(strings.NewReader(v)), nil
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

func (m memFiles) Glob(pattern string) ([]string, error) {
	var out []string
	for name := range m {
		if ok, err := filepath.Match(pattern, name); err != nil {
			return nil, err
		} else if ok {
			out = append(out, name)
		}
	}
	return out, nil
}

// TestImportSquidContinuations: a directive continued over thousands of
// lines is read as one line (and BenchmarkImportSquidContinuations shows
// the cost grows with the lines, not with their square).
func TestImportSquidContinuations(t *testing.T) {
	out, notes, err := importSquid(strings.NewReader(continued(8000)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `host = "10.0.0.1"`) || !strings.Contains(out, "weight = 3") {
		t.Fatalf("the continued cache_peer line was not read whole:\n%s\nnotes %v", out, notes)
	}
	if _, _, err := importSquid(strings.NewReader(strings.Repeat(strings.Repeat("x", 1000)+"\\\n", 1100))); err == nil || !strings.Contains(err.Error(), "continued past") {
		t.Fatalf("a line continued past 1 MiB: %v; want an error naming it", err)
	}
}

// continued is a cache_peer line continued over n lines.
func continued(n int) string {
	var b strings.Builder
	b.WriteString("cache_peer 10.0.0.1 parent 3128 0 \\\n")
	for i := 0; i < n; i++ {
		b.WriteString("no-query \\\n")
	}
	b.WriteString("weight=3\n")
	return b.String()
}

func BenchmarkImportSquidContinuations(b *testing.B) {
	for _, n := range []int{1000, 8000} {
		conf := continued(n)
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				importSquid(strings.NewReader(conf))
			}
		})
	}
}

// TestImportSquidTLSAndAuth: https_port, auth_param basic with
// basic_ncsa_auth, and the cache_peer TLS options and login=PASS carry
// over; another auth scheme is listed.
func TestImportSquidTLSAndAuth(t *testing.T) {
	conf := `http_port 3128
https_port 10.0.0.5:3129 tls-cert=/etc/squid/proxy.pem tls-key=/etc/squid/proxy.key
auth_param basic program /usr/lib/squid/basic_ncsa_auth /etc/squid/passwords
auth_param basic realm "Corporate proxy"
auth_param basic children 5
auth_param digest program /usr/lib/squid/digest_file_auth /etc/squid/digest
cache_peer up.example.net parent 3129 0 no-query tls tls-cafile=/etc/squid/ca.pem tls-domain=up.example.net login=PASS
cache_peer old.example.net parent 3130 0 no-query ssl sslcafile=/etc/ssl/ca.pem ssldomain=old.example.net
`
	out, notes, err := importSquid(strings.NewReader(conf))
	if err != nil {
		t.Fatal(err)
	}
	cfg, ps := config.ParseFiles([]byte(out), false)
	if len(ps) > 0 {
		t.Fatalf("the output does not pass -check: %v\n%s", ps, out)
	}
	if cfg.Proxy.TLSListen != "10.0.0.5:3129" || cfg.Proxy.TLSCert != "/etc/squid/proxy.pem" || cfg.Proxy.TLSKey != "/etc/squid/proxy.key" {
		t.Errorf("tls listener %q %q %q", cfg.Proxy.TLSListen, cfg.Proxy.TLSCert, cfg.Proxy.TLSKey)
	}
	if cfg.Auth.BasicUsers != "/etc/squid/passwords" || cfg.Auth.Realm != "Corporate proxy" {
		t.Errorf("auth %+v", cfg.Auth)
	}
	up, old := cfg.Peers[0], cfg.Peers[1]
	if !up.TLS || up.TLSCA != "/etc/squid/ca.pem" || up.TLSName != "up.example.net" || up.Login != "PASS" {
		t.Errorf("up = %+v", up)
	}
	if !old.TLS || old.TLSCA != "/etc/ssl/ca.pem" || old.TLSName != "old.example.net" {
		t.Errorf("old = %+v", old)
	}
	if !strings.Contains(strings.Join(notes, "\n"), "auth_param digest") {
		t.Errorf("notes %q; want the digest scheme listed", notes)
	}
}

// TestImportSquidAccessLog: an access log of every request in Squid's
// native format, to a file, carries over to [log] access_log; one that
// peerd would write differently (another format, some requests only,
// syslog) is listed instead, never widened.
func TestImportSquidAccessLog(t *testing.T) {
	for _, tc := range []struct {
		name, conf string
		want       string // the log carried over (Squid's path: peerd writes its own)
		note       string // in the notes ("" for none)
		format     string // [log] access_log_format ("" for squid)
	}{
		{"bare path", "access_log /var/log/squid/access.log", "/var/log/squid/access.log", "", ""},
		{"squid format", "access_log /var/log/squid/access.log squid", "/var/log/squid/access.log", "", ""},
		{"stdio", "access_log stdio:/var/log/squid/access.log", "/var/log/squid/access.log", "", ""},
		{"daemon, options", "access_log daemon:/l/access.log logformat=squid buffer-size=64KB rotate=5", "/l/access.log", "", ""},
		{"none", "access_log none", "", "", ""},
		{"combined", "access_log /l/access.log combined", "/l/access.log", "", "combined"},
		{"a logformat of its own", "logformat mine %ts.%03tu %6tr %>a %Ss/%03>Hs %ru\naccess_log /l/access.log mine", "/l/access.log", "", "%ts.%03tu %6tr %>a %Ss/%03>Hs %ru"},
		{"a logformat with a code peerd lacks", "logformat mine %ts %ru %<lp\naccess_log /l/access.log logformat=mine", "", "%<lp is not a code", ""},
		{"a format peerd lacks", "access_log /l/access.log useragent", "", "no useragent format", ""},
		{"some requests", "acl office src 10.0.0.0/8\naccess_log /l/access.log squid office", "", "only the requests office matches", ""},
		{"excluded first", "acl hc src 10.9.9.9\naccess_log none hc\naccess_log /l/access.log", "", "leaves some requests out", ""},
		{"excluded after", "acl hc src 10.9.9.9\naccess_log /l/access.log\naccess_log none hc", "/l/access.log", "logs every request", ""},
		{"syslog", "access_log syslog:local4.info squid", "", "module syslog", ""},
		{"two files", "access_log /l/a.log\naccess_log /l/b.log", "/l/a.log", "one access log, /l/a.log", ""},
		{"no ICP queries", "access_log /l/a.log\nlog_icp_queries off", "/l/a.log", "", ""},
		{"whole URLs", "access_log /l/a.log\nstrip_query_terms off", "/l/a.log", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, out, err := convertSquid(strings.NewReader(tc.conf))
			if err != nil {
				t.Fatal(err)
			}
			notes := s.notes
			cfg, ps := config.ParseFiles([]byte(out), false)
			if len(ps) > 0 {
				t.Fatalf("the output does not pass -check: %v\n%s", ps, out)
			}
			// Squid's log is never peerd's: a log carried over is written
			// to peerd's own file, and the import says so.
			if want := map[bool]string{true: peerdAccessLog}[tc.want != ""]; cfg.Log.AccessLog != want {
				t.Errorf("access_log = %q; want %q\n%s", cfg.Log.AccessLog, want, out)
			}
			if said := strings.Join(s.says, "\n"); tc.want != "" && !strings.Contains(said, tc.want+" stays Squid's") {
				t.Errorf("the import does not say Squid's log %s stays Squid's: %q", tc.want, s.says)
			}
			if want := cmp.Or(tc.format, "squid"); cfg.Log.AccessLogFormat != want {
				t.Errorf("access_log_format = %q; want %q\n%s", cfg.Log.AccessLogFormat, want, out)
			}
			if want := !strings.Contains(tc.conf, "log_icp_queries off"); cfg.ICP.LogQueries != want {
				t.Errorf("[icp] log_queries = %v; want %v\n%s", cfg.ICP.LogQueries, want, out)
			}
			if want := !strings.Contains(tc.conf, "strip_query_terms off"); cfg.Log.StripQueryTerms != want {
				t.Errorf("[log] strip_query_terms = %v; want %v\n%s", cfg.Log.StripQueryTerms, want, out)
			}
			all := strings.Join(notes, "\n")
			if tc.note == "" && strings.Contains(all, "access_log") {
				t.Errorf("notes %q; want none about access_log", notes)
			}
			if tc.note != "" && !strings.Contains(all, tc.note) {
				t.Errorf("notes %q; want one saying %q", notes, tc.note)
			}
		})
	}
}

// TestImportSquidNotesHoldNoSecret: what import-squid prints about lines
// it cannot carry over (stderr and comments) names them without their
// secrets; a login it carries over is in the config, where it is needed.
func TestImportSquidNotesHoldNoSecret(t *testing.T) {
	conf := `cachemgr_passwd hunter2 all
cache_peer p1.example parent 3128 0 no-query login=*:starpass
cache_peer p2.example parent 3128 0 no-query login=PASSTHRU
cache_peer p3.example parent 3128 0 no-query login=alice:kept-pass
sslproxy_foo password=optpass
`
	out, notes, err := importSquid(strings.NewReader(conf))
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(notes, "\n")
	for _, secret := range []string{"hunter2", "starpass", "optpass"} {
		if strings.Contains(all, secret) || strings.Contains(out, secret) {
			t.Errorf("the secret %q is printed:\n%s\n%s", secret, all, out)
		}
	}
	for _, want := range []string{"cachemgr_passwd *** all", "login=*:***", "password=***"} {
		if !strings.Contains(all, want) {
			t.Errorf("notes %q; want one naming the line as %q", notes, want)
		}
	}
	if !strings.Contains(out, `login = "PASS"`) {
		t.Errorf("login=PASSTHRU is not carried over as PASS:\n%s", out)
	}
	if !strings.Contains(out, `login = "alice:kept-pass"`) {
		t.Errorf("the login carried over is missing:\n%s", out)
	}
}

// TestImportSquidProxySettings: the timeouts, shutdown_lifetime,
// forwarded_for, via and collapsed_forwarding become the peerd keys that
// do the same, the last line winning as in Squid; values peerd cannot take
// are listed, never dropped silently, and never make an invalid config.
func TestImportSquidProxySettings(t *testing.T) {
	base := config.Default()
	// is checks the keys get reads, printed together (fmt.Sprint), against
	// want.
	is := func(want string, get func(*config.File) any) func(*config.File) string {
		return func(f *config.File) string {
			if got := fmt.Sprint(get(f)); got != want {
				return fmt.Sprintf("got %s; want %s", got, want)
			}
			return ""
		}
	}
	privacy := func(f *config.File) any { return []any{f.Proxy.ForwardedFor, f.Proxy.Via} }
	memory := func(f *config.File) any { return int64(f.Cache.Memory) }
	removed := func(f *config.File) any { return f.Proxy.RequestHeaderRemove }
	pidFile := func(f *config.File) any { return f.Proxy.PIDFile }
	outgoing := func(f *config.File) any { return f.Proxy.OutgoingAddress }
	for _, tc := range []struct {
		name, conf string
		check      func(*config.File) string // "" when right; what is wrong otherwise
		note       string                    // in the notes ("" for none)
		err        string                    // the import fails with this
	}{
		{"timeouts", "read_timeout 60 seconds\nrequest_timeout 30 seconds\nclient_idle_pconn_timeout 2 minutes\nwrite_timeout 5 minutes\nshutdown_lifetime 3 seconds",
			is("[1m0s 30s 2m0s 5m0s 3s]", func(f *config.File) any {
				c := f.Proxy
				return []any{c.ReadTimeout, c.RequestTimeout, c.ClientIdleTimeout, c.WriteTimeout, c.ShutdownTimeout}
			}), "", ""},
		{"the older idle name, the last line wins", "persistent_request_timeout 1 minute\nread_timeout 1 minute\nread_timeout 2 minutes",
			is("[1m0s 2m0s]", func(f *config.File) any { return []any{f.Proxy.ClientIdleTimeout, f.Proxy.ReadTimeout} }), "", ""},
		{"forwarded_for delete, via off", "forwarded_for delete\nvia off", is("[delete false]", privacy), "", ""},
		{"forwarded_for off, via on", "forwarded_for off\nvia on", is("[off true]", privacy), "", ""},
		{"collapsed_forwarding off", "collapsed_forwarding off", is("false", func(f *config.File) any { return f.Cache.Collapse }), "", ""},
		{"a zero timeout keeps peerd's default", "shutdown_lifetime 0 seconds",
			is(base.Proxy.ShutdownTimeout.String(), func(f *config.File) any { return f.Proxy.ShutdownTimeout }),
			"shutdown_lifetime 0 seconds: peerd needs a positive shutdown_timeout", ""},
		// Side by side, peerd and Squid would write one pid file.
		{"pid_filename", "pid_filename /run/squid.pid", is("", pidFile), "pid_filename /run/squid.pid: not carried over", ""},
		{"pid_filename none", "pid_filename none", is("", pidFile), "", ""},
		// A default follows what it depends on: the 2 s idle grace is
		// cut to a 1 s shutdown_lifetime.
		{"a short shutdown_lifetime", "shutdown_lifetime 1 seconds",
			is("[1s 1s]", func(f *config.File) any { return []any{f.Proxy.ShutdownTimeout, f.Proxy.ShutdownIdleGrace} }), "", ""},
		{"cache deny all stores nothing", "cache_mem 64 MB\ncache_dir ufs /var/spool/squid 1000 16 256\ncache deny all\ncache allow QUERY",
			is("[0 ]", func(f *config.File) any { return []any{int64(f.Cache.Memory), f.Cache.Disk} }), "cache_dir /var/spool/squid: cache deny all stores nothing", ""},
		{"cache allow all is the default", "no_cache allow all", is(fmt.Sprint(int64(base.Cache.Memory)), memory), "", ""},
		{"some requests uncached is listed", "acl QUERY urlpath_regex cgi-bin\ncache deny QUERY\ncache deny all", is(fmt.Sprint(int64(base.Cache.Memory)), memory), "cache deny QUERY: peerd stores what RFC 9111 allows", ""},
		{"request_header_access deny all", "request_header_access Referer deny all\nrequest_header_access Referer allow all\nrequest_header_access From allow all\nrequest_header_access From deny all", is("[Referer]", removed), "", ""},
		{"request_header_access for some requests is listed", "acl localnet src 10.0.0.0/8\nrequest_header_access User-Agent deny localnet\nrequest_header_access User-Agent deny all", is("[]", removed), "request_header_access User-Agent deny localnet: peerd removes a field from every request or none", ""},
		{"request_header_access of a field peerd writes is listed", "request_header_access Host deny all", is("[]", removed), "Host: peerd writes this field itself", ""},
		{"request_header_access All is listed", "request_header_access All deny all", is("[]", removed), "peerd removes fields it is given by name only", ""},
		{"quick_abort", "quick_abort_min -1 QB\nquick_abort_max 1 MB\nquick_abort_pct 80",
			is("[-1 1048576 80]", func(f *config.File) any {
				return []any{int64(f.Cache.QuickAbortMin), int64(f.Cache.QuickAbortMax), f.Cache.QuickAbortPct}
			}), "", ""},
		{"quick_abort off", "quick_abort_min 0 KB\nquick_abort_max 0 KB",
			is("[0 0]", func(f *config.File) any { return []any{int64(f.Cache.QuickAbortMin), int64(f.Cache.QuickAbortMax)} }), "", ""},
		{"refresh_pattern options that break RFC 9111", "refresh_pattern -i \\.deb$ 40320 100% 259200 refresh-ims override-expire ignore-no-store\nrefresh_pattern . 0 20% 4320",
			func(f *config.File) string {
				if ps := f.Cache.RefreshPatterns; len(ps) != 1 || ps[0].Pattern != `(?i)\.deb$` || ps[0].Min != 672*time.Hour || !ps[0].RefreshIMS {
					return fmt.Sprintf("refresh_patterns %+v; want the .deb pattern without its options", ps)
				}
				return ""
			}, "options override-expire ignore-no-store (peerd keeps to RFC 9111; the pattern itself is carried over)", ""},
		{"what peerd always does", "minimum_object_size 0 KB\nserver_persistent_connections on\nclient_persistent_connections on\nrequest_start_timeout 20 seconds",
			is("20s", func(f *config.File) any { return f.Proxy.RequestStartTimeout }), "", ""},
		{"what peerd cannot do is listed", "minimum_object_size 4 KB\nserver_persistent_connections off",
			func(*config.File) string { return "" }, "server_persistent_connections off", ""},
		{"tcp_outgoing_address", "tcp_outgoing_address 10.0.0.5\ntcp_outgoing_address 10.0.0.6 all", is("10.0.0.5", outgoing), "", ""},
		{"tcp_outgoing_address for some requests is listed", "acl dst_x dstdomain .x.test\ntcp_outgoing_address 10.0.0.5 dst_x\nhttp_access allow all",
			is("", outgoing), "tcp_outgoing_address 10.0.0.5 dst_x", ""},
		{"dead_peer_timeout", "dead_peer_timeout 300 seconds", is("5m0s", func(f *config.File) any { return f.ICP.DeadPeerTimeout }), "", ""},
		{"an unknown forwarded_for word", "forwarded_for maybe", nil, "", `forwarded_for "maybe"`},
		{"via with no word", "via", nil, "", "via: want on or off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, notes, err := importSquid(strings.NewReader(tc.conf))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v; want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cfg, ps := config.ParseFiles([]byte(out), false)
			if len(ps) > 0 {
				t.Fatalf("the output does not pass -check: %v\n%s", ps, out)
			}
			if wrong := tc.check(cfg); wrong != "" {
				t.Errorf("%s\n%s", wrong, out)
			}
			all := strings.Join(notes, "\n")
			if tc.note == "" && len(notes) > 0 {
				t.Errorf("notes %q; want none", notes)
			}
			if tc.note != "" && !strings.Contains(all, tc.note) {
				t.Errorf("notes %q; want one saying %q", notes, tc.note)
			}
		})
	}
}

// TestImportTimeoutCombinations: a squid.conf that Squid accepts imports
// to a config -check accepts, whatever its timeouts say together (a
// default that depends on another key follows it). The combinations are
// drawn from a fixed seed.
func TestImportTimeoutCombinations(t *testing.T) {
	directives := []string{"read_timeout", "request_timeout", "client_idle_pconn_timeout", "persistent_request_timeout",
		"write_timeout", "shutdown_lifetime", "connect_timeout", "peer_connect_timeout", "pconn_timeout", "dead_peer_timeout",
		"forward_timeout"}
	values := []string{"0 seconds", "1 seconds", "0.5 seconds", "2 seconds", "30 seconds", "1 minute", "15 minutes", "1 hour", "1 day"}
	rng := rand.New(rand.NewPCG(49, 51))
	for i := range 400 {
		var b strings.Builder
		b.WriteString("http_port 127.0.0.1:3128\ncache_peer 10.0.0.1 parent 3128 0 no-query name=p1\n")
		for _, d := range directives {
			if rng.IntN(2) == 0 {
				fmt.Fprintf(&b, "%s %s\n", d, values[rng.IntN(len(values))])
			}
		}
		out, _, err := importSquid(strings.NewReader(b.String()))
		if err != nil {
			t.Fatalf("combination %d: %v\n%s", i, err, b.String())
		}
		if _, ps := config.ParseFiles([]byte(out), false); len(ps) > 0 {
			t.Fatalf("combination %d imports to a config -check refuses: %v\nsquid.conf:\n%s", i, ps, b.String())
		}
	}
}

// TestImportLossyNeedsTheFlag: an http_access line with an ACL peerd
// cannot say stops the import (exit 1, the line named, nothing written);
// -lossy writes it, the line listed. An import that serves everyone on a
// public listener says "open proxy".
func TestImportLossyNeedsTheFlag(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	lossy := write("lossy.conf", "http_port 3128\nacl localnet src 10.0.0.0/8\nacl legacy external ldap_group staff\nhttp_access deny legacy\nhttp_access allow localnet\nhttp_access deny all\n")
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Command(context.Background(), args, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	code, out, errOut := run(lossy)
	if code != 1 || out != "" || !strings.Contains(errOut, "line 4: http_access deny legacy") || !strings.Contains(errOut, "-lossy") {
		t.Fatalf("without -lossy: exit %d, stdout %q, stderr %q; want 1, nothing, line 4 named", code, out, errOut)
	}
	code, out, errOut = run("-lossy", lossy)
	if code != 0 || !strings.Contains(out, "line 4: http_access deny legacy") || !strings.Contains(errOut, "line 4") {
		t.Fatalf("-lossy: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	open := write("open.conf", "http_port 3128\nhttp_access allow all\n")
	if code, out, errOut := run(open); code != 0 || out == "" || !strings.Contains(errOut, "open proxy") {
		t.Fatalf("allow all on every address: exit %d, stderr %q; want the config and an open-proxy warning", code, errOut)
	}
	local := write("local.conf", "http_port 127.0.0.1:3128\nhttp_access allow all\n")
	if code, _, errOut := run(local); code != 0 || strings.Contains(errOut, "open proxy") {
		t.Fatalf("allow all on loopback: exit %d, stderr %q; want no open-proxy warning", code, errOut)
	}
}
