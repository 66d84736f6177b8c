package squidimport

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/peerd/peerd/cmd/peerd/internal/config"
	"github.com/peerd/peerd/internal/match"
)

// decide runs an imported config's [[rule]]s and [access] (deny_to, the
// ports) the way the proxy does: the first rule that matches decides
// (none: allow), then the destination policy.
func decide(t *testing.T, c *config.File, method, url, client string, port int) bool {
	t.Helper()
	host := url
	if i := strings.Index(host, "://"); i >= 0 {
		host = host[i+3:]
	}
	host, _, _ = strings.Cut(host, "/")
	host, _, _ = strings.Cut(host, ":")
	if a, err := netip.ParseAddr(host); err == nil {
		for _, d := range c.Access.DenyTo {
			if d.Net.IsValid() && d.Net.Contains(a) {
				return false
			}
		}
	}
	r := match.Request{Host: host, Client: netip.MustParseAddr(client), Port: port, Method: method, URL: url}
	for _, rs := range c.Rules {
		m, err := match.Compile(match.Spec{Domains: rs.Domains, Src: rs.Src, Ports: rs.Ports, Methods: rs.Methods, Users: rs.Users, URLs: rs.URLs})
		if err != nil {
			t.Fatal(err)
		}
		if m.Match(&r) {
			if rs.Action != "allow" {
				return false
			}
			break
		}
	}
	pol, err := c.Policy()
	if err != nil {
		t.Fatal(err)
	}
	return pol.CheckPort(method == "CONNECT", port) == nil
}

// TestImportSquidAccess: http_access with Squid's usual lines decides as
// Squid would; a line with an ACL peerd cannot express is dropped when it
// allows and widened when it denies, and both are listed.
func TestImportSquidAccess(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "squid", "access.conf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out, notes, err := importSquid(f)
	if err != nil {
		t.Fatal(err)
	}
	c, ps := config.ParseFiles([]byte(out), false)
	if len(ps) > 0 {
		t.Fatalf("%v\n%s", ps, out)
	}
	for _, tc := range []struct {
		method, url, client string
		port                int
		want                bool
		why                 string
	}{
		{"GET", "http://example.com/", "10.1.2.3", 80, true, "localnet"},
		{"GET", "http://example.com/", "127.0.0.1", 80, true, "localhost"},
		{"GET", "http://example.com/", "203.0.113.9", 80, false, "not localnet: Squid's implicit deny after a last allow"},
		{"GET", "http://example.com:25/", "10.1.2.3", 25, false, "deny !Safe_ports"},
		{"CONNECT", "example.com:8443", "10.1.2.3", 8443, false, "deny CONNECT !SSL_ports"},
		{"CONNECT", "example.com:443", "10.1.2.3", 443, true, "CONNECT to 443"},
		{"GET", "http://example.com/squid-internal-mgr/menu", "10.1.2.3", 80, false, "deny manager"},
		{"GET", "http://example.com/squid-internal-mgr/menu", "127.0.0.1", 80, true, "allow localhost manager"},
		{"GET", "http://127.0.0.1/", "10.1.2.3", 80, false, "deny to_localhost"},
		{"GET", "http://x.ads.example/", "10.1.2.3", 80, false, "deny blocked weird, widened to deny blocked"},
	} {
		if got := decide(t, c, tc.method, tc.url, tc.client, tc.port); got != tc.want {
			t.Errorf("%s %s from %s: allowed=%v; want %v (%s)", tc.method, tc.url, tc.client, got, tc.want, tc.why)
		}
	}
	all := strings.Join(notes, "\n")
	for _, want := range []string{"line 13: http_access deny blocked weird", "widened", "line 14: http_access allow localnet weird: not carried over"} {
		if !strings.Contains(all, want) || !strings.Contains(out, want) {
			t.Errorf("notes and comments lack %q:\n%s", want, all)
		}
	}
	// always_direct for a dst acl: a route on literal addresses (a name
	// that would resolve there goes to the parent: the safe side).
	if len(c.Routes) != 1 || c.Routes[0].Direct != "always" || strings.Join(c.Routes[0].Dst, ",") != "10.0.0.0/8" {
		t.Errorf("routes %+v; want always_direct for dst 10.0.0.0/8", c.Routes)
	}
	if c.Proxy.Direct.String() != "never" {
		t.Errorf("direct %v; want never (never_direct allow all)", c.Proxy.Direct)
	}
}

// TestImportSquidRoutes: cache_peer_access and cache_peer_domain restrict
// a peer to some requests; never_direct with an ACL is a route.
func TestImportSquidRoutes(t *testing.T) {
	conf := `acl intranet dstdomain .corp.example
acl media dstdomain .cdn.example
cache_peer a.example parent 3128 0 no-query
cache_peer b.example parent 3128 0 no-query
cache_peer c.example parent 3128 0 no-query
cache_peer_access b.example allow media
cache_peer_access b.example deny all
cache_peer_domain c.example .video.example
never_direct allow intranet
http_access allow all
`
	out, _, err := importSquid(strings.NewReader(conf))
	if err != nil {
		t.Fatal(err)
	}
	c, ps := config.ParseFiles([]byte(out), false)
	if len(ps) > 0 {
		t.Fatalf("%v\n%s", ps, out)
	}
	// What each request may use, as Squid decides it: a and b for the
	// media domain, a and c for video, a only (never DIRECT) for the
	// intranet, a for the rest.
	for host, want := range map[string]string{
		"x.cdn.example":   "[a.example b.example] allow",
		"x.video.example": "[a.example c.example] allow",
		"x.corp.example":  "[a.example] never",
		"other.example":   "[a.example] allow",
	} {
		peers, direct := routeFor(t, c, host)
		if got := fmt.Sprint(peers) + " " + direct; got != want {
			t.Errorf("%s: %s; want %s\n%s", host, got, want, out)
		}
	}
}

// routeFor is what an imported config's routes give a GET of host: the
// peers and the direct mode of the first route that matches, else every
// peer and the global direct.
func routeFor(t *testing.T, c *config.File, host string) ([]string, string) {
	t.Helper()
	for _, r := range c.Routes {
		m, err := match.Compile(r.Spec)
		if err != nil {
			t.Fatal(err)
		}
		if m.Match(&match.Request{Host: host, Port: 80, Method: "GET", URL: "http://" + host + "/", Client: netip.MustParseAddr("127.0.0.1")}) {
			d := r.Direct
			if d == "" {
				d = c.Proxy.Direct.String()
			}
			return r.Peers, d
		}
	}
	var all []string
	for _, p := range c.Peers {
		all = append(all, p.Name)
	}
	return all, c.Proxy.Direct.String()
}

// TestImportSharedCorpus imports the real-world squid.conf files of
// ../shared/squidconf-corpus (test data, read in place; skipped where the
// corpus is absent). Every forward-proxy file converts to a config that
// passes the checks (origin-server files are refused by name); at least
// 90% of the lines of the families issue 24 names are carried over: a
// line counts when nothing about it is listed as not carried over (an
// acl line when its acl can be expressed). The figure is printed.
func TestImportSharedCorpus(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "..", "..", "shared", "squidconf-corpus")
	files, _ := filepath.Glob(filepath.Join(dir, "*.conf"))
	if len(files) == 0 {
		t.Skip("no corpus at " + dir + ": skipping the real-world squid.conf import test")
	}
	families := map[string]bool{"acl": true, "http_access": true, "cache_peer_access": true, "cache_peer_domain": true,
		"never_direct": true, "always_direct": true, "prefer_direct": true, "refresh_pattern": true,
		"auth_param": true, "https_port": true, "cache_dir": true}
	var converted, refused, total, carried int
	byFamily := map[string][2]int{}
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s, out, err := convertFrom(absentEmpty{}, path, strings.NewReader(string(src)))
		if err != nil {
			if !strings.Contains(err.Error(), "originserver") && !strings.Contains(err.Error(), "multicast") {
				t.Errorf("%s: %v", filepath.Base(path), err)
			}
			refused++
			continue
		}
		converted++
		if _, ps := config.ParseFiles([]byte(out), false); len(ps) > 0 {
			t.Errorf("%s: the output does not pass -check: %v", filepath.Base(path), ps)
			continue
		}
		listed := s.noted
		for _, l := range s.lines {
			if !families[l.directive] {
				continue
			}
			ok := !listed[l.n]
			if l.directive == "acl" {
				a := s.acls[l.arg]
				_, _, err := a.condition(l.arg, false, false)
				ok = a != nil && err == nil
			}
			total++
			f := byFamily[l.directive]
			f[1]++
			if ok {
				carried++
				f[0]++
			}
			byFamily[l.directive] = f
		}
	}
	pct := 100 * float64(carried) / float64(max(total, 1))
	t.Logf("corpus: %d files converted, %d refused (origin servers); %d of %d lines of the issue-24 families carried over (%.1f%%)", converted, refused, carried, total, pct)
	for _, f := range slices.Sorted(maps.Keys(byFamily)) {
		t.Logf("  %-18s %3d of %3d", f, byFamily[f][0], byFamily[f][1])
	}
	// Issue 24 asks for 90%. What is left: a second cache_dir (peerd has
	// one disk store); refresh_pattern options other than refresh-ims (refresh-ims,
	// override-expire, ...); acl values in files that are not on this
	// machine; ACL types with no equivalent (at_step, any-of, ...). This
	// floor keeps what is done.
	if pct < 91 {
		t.Errorf("%.1f%% of the lines carried over; it was 91.0%% (issue 24 asks for 90%%)", pct)
	}
}

// absentEmpty reads the file system, and a file the corpus includes from
// its own machine as empty, but for /etc/squid3/cache_peers.conf, which
// holds one parent (what its name says; without one, the file's
// never_direct leaves no way out, and -check rightly refuses it).
type absentEmpty struct{ osFiles }

func (f absentEmpty) Open(name string) (io.ReadCloser, error) {
	r, err := f.osFiles.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		stand := ""
		if filepath.Base(name) == "cache_peers.conf" {
			stand = "cache_peer 10.0.0.1 parent 3128 0 no-query\n"
		}
		return io.NopCloser(strings.NewReader(stand)), nil
	}
	return r, err
}

// TestImportICPAccess: icp_access becomes the [icp] allow list Squid's
// first-match evaluation gives for every source; without it (Squid's
// default deny) the ICP port stays closed; what cannot be said of a
// query's source fails closed.
func TestImportICPAccess(t *testing.T) {
	for _, tc := range []struct {
		name, conf string
		allow      []string // nil: no ICP listener
		note       string
	}{
		{"no icp_access: nobody", "", nil, "answers no source"},
		{"allow a network", "acl sibs src 10.1.0.0/16\nicp_access allow sibs\n", []string{"10.1.0.0/16"}, ""},
		{"deny one host first", "acl bad src 10.1.2.3\nacl sibs src 10.1.0.0/16\nicp_access deny bad\nicp_access allow sibs\nicp_access deny all\n",
			[]string{"10.1.0.0/23", "10.1.2.0/31", "10.1.2.2/32", "10.1.2.4/30", "10.1.2.8/29", "10.1.2.16/28", "10.1.2.32/27", "10.1.2.64/26",
				"10.1.2.128/25", "10.1.3.0/24", "10.1.4.0/22", "10.1.8.0/21", "10.1.16.0/20", "10.1.32.0/19", "10.1.64.0/18", "10.1.128.0/17"}, ""},
		{"a last deny lets the rest in", "acl bad src 0.0.0.0/1 ::/1\nicp_access deny bad\n", []string{"128.0.0.0/1", "8000::/1"}, ""},
		{"negated src", "acl lan src 192.168.0.0/16\nicp_access deny !lan\nicp_access allow all\n", []string{"192.168.0.0/16"}, ""},
		{"allow all", "icp_access allow all\n", []string{"0.0.0.0/0", "::/0"}, ""},
		{"an allow it cannot say is dropped", "acl d dstdomain .example.com\nacl sibs src 10.0.0.0/8\nicp_access allow d\nicp_access allow sibs\n", []string{"10.0.0.0/8"}, "icp_access allow d: not carried over"},
		{"a deny it cannot say is widened", "acl d dstdomain .example.com\nacl sibs src 10.0.0.0/8\nicp_access deny d sibs\nicp_access allow all\n",
			[]string{"0.0.0.0/5", "8.0.0.0/7", "11.0.0.0/8", "12.0.0.0/6", "16.0.0.0/4", "32.0.0.0/3", "64.0.0.0/2", "128.0.0.0/1", "::/0"}, "widened"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, notes, err := importSquid(strings.NewReader("icp_port 3130\n" + tc.conf))
			if err != nil {
				t.Fatal(err)
			}
			c, probs := config.Parse([]byte(out))
			if len(probs) > 0 {
				t.Fatalf("%v\n%s", probs, out)
			}
			if tc.allow == nil {
				if c.ICP.Listen != "" {
					t.Fatalf("listen %q; want no ICP listener", c.ICP.Listen)
				}
			} else if c.ICP.Listen == "" || fmt.Sprint(c.ICP.Allow) != fmt.Sprint(tc.allow) {
				t.Fatalf("listen %q allow %v; want %v", c.ICP.Listen, c.ICP.Allow, tc.allow)
			}
			if tc.note != "" && !strings.Contains(strings.Join(notes, "\n"), tc.note) {
				t.Fatalf("notes %q; want one with %q", notes, tc.note)
			}
		})
	}
}
