package squidimport

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/peerd/peerd/cmd/peerd/internal/config"
	"github.com/peerd/peerd/forwarding"
)

// importFiles writes files (name -> content) into a directory and runs
// "peerd import-squid [flags] DIR/squid.conf" from another working
// directory: its exit code, stdout and stderr.
func importFiles(t *testing.T, files map[string]string, flags ...string) (dir string, code int, out, errOut string) {
	t.Helper()
	dir = t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(content, "$DIR", dir)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(t.TempDir()) // relative includes are the including file's, not the shell's
	var o, e bytes.Buffer
	code = Command(context.Background(), append(flags, filepath.Join(dir, "squid.conf")), &o, &e)
	return dir, code, o.String(), e.String()
}

// TestImportFollowsIncludes: a deny in conf.d/*.conf (Debian's stock
// squid.conf includes it) is carried over in its place among the lines,
// through nested and relative includes, and messages name the included
// file and its line.
func TestImportFollowsIncludes(t *testing.T) {
	dir, code, out, errOut := importFiles(t, map[string]string{
		"squid.conf":            "http_port 127.0.0.1:3128\nacl lan src 10.0.0.0/8\ninclude conf.d/*.conf\nhttp_access allow lan\n",
		"conf.d/10-deny.conf":   "# blocked sites\nacl bad dstdomain .bad.example\nhttp_access deny bad\n",
		"conf.d/20-more.conf":   "include ../extra/one.conf\nhttp_access deny lan worse\n",
		"conf.d/README":         "not a .conf: not read\n",
		"extra/one.conf":        "acl worse dstdomain .worse.example\nbogus_directive on\n",
		"conf.d/sub/deep.conf":  "http_access deny all\n", // not matched by conf.d/*.conf
		"conf.d/30-later.conf":  "\n\nvisible_hostname child\n",
		"unrelated/ignore.conf": "http_access deny all\n",
	})
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	c, ps := config.ParseFiles([]byte(out), false)
	if len(ps) > 0 {
		t.Fatalf("%v\n%s", ps, out)
	}
	for _, tc := range []struct {
		url, client string
		want        bool
	}{
		{"http://www.bad.example/", "10.1.1.1", false},   // the deny in conf.d/10-deny.conf
		{"http://www.worse.example/", "10.1.1.1", false}, // acl from a nested include, rule after it
		{"http://ok.example/", "10.1.1.1", true},         // allow lan, after the includes
		{"http://ok.example/", "192.0.2.1", false},       // Squid's implicit deny after a last allow
	} {
		if got := decide(t, c, "GET", tc.url, tc.client, 80); got != tc.want {
			t.Errorf("GET %s from %s: allowed=%v; want %v\n%s", tc.url, tc.client, got, tc.want, out)
		}
	}
	if c.Proxy.Name != "child" {
		t.Errorf("visible_hostname from conf.d/30-later.conf: name %q", c.Proxy.Name)
	}
	for _, want := range []string{
		filepath.Join(dir, "conf.d", "10-deny.conf") + " line 3", // the rule's comment
		filepath.Join(dir, "extra", "one.conf") + " line 2: bogus_directive on",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the output does not name %q:\n%s", want, out)
		}
	}
	if want := "not carried over: " + filepath.Join(dir, "extra", "one.conf") + " line 2: bogus_directive on"; !strings.Contains(errOut, want) {
		t.Errorf("stderr lacks %q:\n%s", want, errOut)
	}
	if !strings.Contains(out, "# squid.conf line 4") {
		t.Errorf("the allow after the include is not named squid.conf line 4:\n%s", out)
	}
}

// TestImportIncludeFailuresStop: an include that cannot be followed
// stops the import (exit 1, nothing written), naming the line and why,
// as it stops Squid: a missing file, a glob that matches nothing, a
// loop, nesting past Squid's 16 levels.
func TestImportIncludeFailuresStop(t *testing.T) {
	deep := map[string]string{"squid.conf": "include " + filepathName(0) + "\n"}
	for i := range maxIncludeDepth + 1 {
		deep[filepathName(i)] = "include " + filepathName(i+1) + "\n"
	}
	deep[filepathName(maxIncludeDepth+1)] = "http_access allow all\n"
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{"missing file", map[string]string{"squid.conf": "http_port 3128\ninclude /nonexistent/peerd-test.conf\nhttp_access allow all\n"},
			[]string{"line 2: include /nonexistent/peerd-test.conf cannot be read"}},
		{"relative and missing", map[string]string{"squid.conf": "include conf.d/gone.conf\n"}, []string{"line 1: include", "conf.d/gone.conf cannot be read"}},
		{"glob matches nothing", map[string]string{"squid.conf": "\ninclude conf.d/*.conf\n"}, []string{"line 2: include", "matches no file"}},
		{"loop", map[string]string{"squid.conf": "include a.conf\n", "a.conf": "acl x src 10.0.0.1\ninclude b.conf\n", "b.conf": "include a.conf\n"},
			[]string{"line 1: ", "a.conf line 2: ", "b.conf line 1: ", "include loop"}},
		{"includes itself", map[string]string{"squid.conf": "http_port 3128\ninclude squid.conf\n"}, []string{"line 2: include loop"}},
		{"too deep", deep, []string{"more than 16 levels"}},
		{"a bad line in an included file", map[string]string{"squid.conf": "include x.conf\n", "x.conf": "\nhttp_port nowhere\n"},
			[]string{"x.conf line 2: http_port"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, code, out, errOut := importFiles(t, tc.files)
			if code != 1 || out != "" {
				t.Fatalf("exit %d, stdout %q; want 1 and nothing written\n%s", code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q lacks %q", errOut, w)
				}
			}
		})
	}
}

func filepathName(i int) string { return "d" + string(rune('a'+i)) + ".conf" }

// TestImportImplicitLastRule: Squid's implicit last http_access rule is
// reproduced in every case, and the import says which it is. No line at
// all denies everyone, whatever peerd's own default would be; after a
// last allow, what no line matched is denied; after a last deny, it is
// allowed (from any source, as in Squid).
func TestImportImplicitLastRule(t *testing.T) {
	for _, tc := range []struct {
		name, conf string
		allowed    map[string]bool // client -> allowed, for GET http://ok.example/
		say        string
	}{
		{"no line at all", "http_port 127.0.0.1:3128\n",
			map[string]bool{"10.1.1.1": false, "192.168.1.1": false, "127.0.0.1": false}, "no http_access line: Squid denies every request"},
		{"acls but no line", "http_port 127.0.0.1:3128\nacl lan src 10.0.0.0/8\n",
			map[string]bool{"10.1.1.1": false, "127.0.0.1": false}, "no http_access line"},
		{"last allow", "http_port 127.0.0.1:3128\nacl lan src 10.0.0.0/8\nhttp_access allow lan\n",
			map[string]bool{"10.1.1.1": true, "192.168.1.1": false}, "line 3 is an allow: Squid denies what no line matched"},
		{"last deny", "http_port 127.0.0.1:3128\nacl bad src 10.9.0.0/16\nhttp_access deny bad\n",
			map[string]bool{"10.9.1.1": false, "10.1.1.1": true, "203.0.113.7": true}, "line 3 is a deny: Squid allows what no line matched"},
		{"last allow dropped", "http_port 127.0.0.1:3128\nacl lan src 10.0.0.0/8\nacl ext external grp\nhttp_access allow lan\nhttp_access allow ext\n",
			map[string]bool{"10.1.1.1": true, "192.168.1.1": false}, "line 5 is an allow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, out, err := convertSquid(strings.NewReader(tc.conf))
			if err != nil {
				t.Fatal(err)
			}
			c, ps := config.ParseFiles([]byte(out), false)
			if len(ps) > 0 {
				t.Fatalf("%v\n%s", ps, out)
			}
			for client, want := range tc.allowed {
				if !slices.ContainsFunc(c.Proxy.Allow, func(p forwarding.CIDR) bool { return netip.Prefix(p).Contains(netip.MustParseAddr(client)) }) {
					if want {
						t.Errorf("%s: not in [proxy] allow\n%s", client, out)
					}
					continue
				}
				if got := decide(t, c, "GET", "http://ok.example/", client, 80); got != want {
					t.Errorf("GET from %s: allowed=%v; want %v\n%s", client, got, want, out)
				}
			}
			if said := strings.Join(s.says, "\n"); !strings.Contains(said, tc.say) || !strings.Contains(out, tc.say) {
				t.Errorf("the import does not say %q (stderr and comment):\n%s", tc.say, out)
			}
		})
	}
}

// TestImportLossySaysWhatItDid: with -lossy, a deny whose every ACL had
// to go says it now denies every client; one with conditions left names
// them; an allow that had to go says the requests meet the later lines;
// every dropped line has a stderr line; the summary names the policy the
// file gives.
func TestImportLossySaysWhatItDid(t *testing.T) {
	_, code, out, errOut := importFiles(t, map[string]string{"squid.conf": `http_port 127.0.0.1:3128
cache_peer 10.0.0.1 parent 3128 0 no-query weighted-round-robin
cache_peer 10.0.0.2 parent 3128 0 no-query weighted-round-robin
acl lan src 10.0.0.0/8
acl grp external ldap_group staff
acl media dstdomain .media.example
http_access deny grp
http_access deny media grp
http_access allow grp
http_access allow lan
refresh_pattern ^ftp: 1440 20% 10080
refresh_pattern . 0 20% 4320
`}, "-lossy")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	for _, want := range []string{
		"line 7: http_access deny grp: ", "this rule denies every client",
		"line 8: http_access deny media grp: ", "denies every request that matches domains .media.example",
		"line 9: http_access allow grp: not carried over", "meet the lines after it",
		"line 11: refresh_pattern ^ftp: 1440 20% 10080: dropped",
		"weighted-round-robin",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if !strings.Contains(errOut, "policy round-robin for squid.conf's weighted-round-robin") {
		t.Errorf("the summary does not name the file's policy beside peerd's:\n%s", errOut)
	}
	c, ps := config.ParseFiles([]byte(out), false)
	if len(ps) > 0 {
		t.Fatalf("%v\n%s", ps, out)
	}
	if got := decide(t, c, "GET", "http://ok.example/", "10.1.1.1", 80); got {
		t.Errorf("a deny widened to every client let 10.1.1.1 through\n%s", out)
	}
}
