package match

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// TestMatch: Squid's dstdomain, IP ranges, port ranges, methods, users
// and negation.
func TestMatch(t *testing.T) {
	req := func(host, client string, port int, method, user string) *Request {
		return &Request{Host: host, Client: netip.MustParseAddr(client), Port: port, Method: method, User: user}
	}
	for _, tc := range []struct {
		name string
		spec Spec
		r    *Request
		want bool
	}{
		{"dot domain: itself", Spec{Domains: []string{".example.com"}}, req("example.com", "10.0.0.1", 80, "GET", ""), true},
		{"dot domain: a subdomain", Spec{Domains: []string{".example.com"}}, req("a.b.example.com", "10.0.0.1", 80, "GET", ""), true},
		{"dot domain: not a lookalike", Spec{Domains: []string{".example.com"}}, req("badexample.com", "10.0.0.1", 80, "GET", ""), false},
		{"plain domain: exactly", Spec{Domains: []string{"example.com"}}, req("example.com", "10.0.0.1", 80, "GET", ""), true},
		{"plain domain: no subdomain", Spec{Domains: []string{"example.com"}}, req("www.example.com", "10.0.0.1", 80, "GET", ""), false},
		{"domain case and trailing dot", Spec{Domains: []string{"Example.COM."}}, req("example.com", "10.0.0.1", 80, "GET", ""), true},
		{"CIDR in", Spec{Src: []string{"10.1.0.0/16"}}, req("x", "10.1.2.3", 80, "GET", ""), true},
		{"CIDR out", Spec{Src: []string{"10.1.0.0/16"}}, req("x", "10.2.0.1", 80, "GET", ""), false},
		{"single address", Spec{Src: []string{"192.0.2.7"}}, req("x", "192.0.2.7", 80, "GET", ""), true},
		{"IPv4-mapped client", Spec{Src: []string{"10.0.0.0/8"}}, req("x", "::ffff:10.0.0.1", 80, "GET", ""), true},
		{"port range in", Spec{Ports: []string{"1025-65535"}}, req("x", "10.0.0.1", 8080, "GET", ""), true},
		{"port range out", Spec{Ports: []string{"1025-65535"}}, req("x", "10.0.0.1", 80, "GET", ""), false},
		{"method", Spec{Methods: []string{"CONNECT"}}, req("x", "10.0.0.1", 443, "CONNECT", ""), true},
		{"method out", Spec{Methods: []string{"CONNECT"}}, req("x", "10.0.0.1", 443, "GET", ""), false},
		{"negated port: Squid's deny !Safe_ports", Spec{Ports: []string{"!80", "!443"}}, req("x", "10.0.0.1", 25, "GET", ""), true},
		{"negated port: a safe one", Spec{Ports: []string{"!80", "!443"}}, req("x", "10.0.0.1", 443, "GET", ""), false},
		{"negated src", Spec{Src: []string{"!10.0.0.0/8"}}, req("x", "192.0.2.1", 80, "GET", ""), true},
		{"negated domain", Spec{Domains: []string{"!.internal"}}, req("a.internal", "10.0.0.1", 80, "GET", ""), false},
		{"user", Spec{Users: []string{"alice"}}, req("x", "10.0.0.1", 80, "GET", "alice"), true},
		{"user: another", Spec{Users: []string{"alice"}}, req("x", "10.0.0.1", 80, "GET", "bob"), false},
		{"user: any authenticated (REQUIRED)", Spec{Users: []string{"*"}}, req("x", "10.0.0.1", 80, "GET", "bob"), true},
		{"user: not authenticated", Spec{Users: []string{"*"}}, req("x", "10.0.0.1", 80, "GET", ""), false},
		{"every key (AND)", Spec{Domains: []string{".a.com"}, Src: []string{"10.0.0.0/8"}, Methods: []string{"GET"}}, req("x.a.com", "10.9.9.9", 80, "GET", ""), true},
		{"every key: one fails", Spec{Domains: []string{".a.com"}, Src: []string{"10.0.0.0/8"}, Methods: []string{"GET"}}, req("x.a.com", "10.9.9.9", 80, "POST", ""), false},
		{"no keys: everything", Spec{}, req("x", "10.0.0.1", 80, "GET", ""), true},
	} {
		m, err := Compile(tc.spec)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := m.Match(tc.r); got != tc.want {
			t.Errorf("%s: %v; want %v", tc.name, got, tc.want)
		}
	}
	for _, bad := range []Spec{{Domains: []string{"a b"}}, {Src: []string{"10.0.0.0/33"}}, {Ports: []string{"0"}}, {Ports: []string{"9-1"}}, {Methods: []string{"get"}}} {
		if _, err := Compile(bad); err == nil {
			t.Errorf("%+v compiled; want an error", bad)
		}
	}
}

// BenchmarkDomains: a match among 1,000 domains costs the labels of the
// host, not the domains.
func BenchmarkDomains(b *testing.B) {
	var ds []string
	for i := 0; i < 1000; i++ {
		ds = append(ds, fmt.Sprintf(".site%d.example", i))
	}
	m, _ := Compile(Spec{Domains: ds})
	r := &Request{Host: "a.b.site999.example", Client: netip.MustParseAddr("10.0.0.1"), Port: 80, Method: "GET"}
	b.ReportAllocs()
	for b.Loop() {
		if !m.Match(r) {
			b.Fatal("no match")
		}
	}
}

// TestMatchURLs: Squid's url_regex, as import-squid writes the built-in
// "manager" ACL.
func TestMatchURLs(t *testing.T) {
	m, err := Compile(Spec{URLs: []string{`(?i)^cache_object://`, `(?i)^https?://[^/]+/squid-internal-mgr/`}})
	if err != nil {
		t.Fatal(err)
	}
	for u, want := range map[string]bool{
		"http://example.com/squid-internal-mgr/menu": true,
		"HTTP://Example.com/squid-internal-mgr/info": true,
		"cache_object://localhost/info":              true,
		"http://example.com/index.html":              false,
		"http://example.com/x/squid-internal-mgr/":   false,
		"example.com:443":                            false,
	} {
		if got := m.Match(&Request{URL: u}); got != want {
			t.Errorf("%s: %v; want %v", u, got, want)
		}
	}
	neg, _ := Compile(Spec{URLs: []string{`!\.exe$`}})
	if neg.Match(&Request{URL: "http://a/x.exe"}) || !neg.Match(&Request{URL: "http://a/x.zip"}) {
		t.Error("a negated URL expression")
	}
	if _, err := Compile(Spec{URLs: []string{"(unclosed"}}); err == nil || !strings.Contains(err.Error(), "urls") {
		t.Errorf("a bad expression: %v; want an error naming urls", err)
	}
}

// TestMatchDst: Squid's dst, on an address host and on a name through
// the request's resolver; a name that does not resolve matches no address.
func TestMatchDst(t *testing.T) {
	m, err := Compile(Spec{Dst: []string{"10.0.0.0/8", "::1"}})
	if err != nil {
		t.Fatal(err)
	}
	resolve := func(host string) []netip.Addr {
		if host == "intranet.test" {
			return []netip.Addr{netip.MustParseAddr("10.2.3.4")}
		}
		return nil
	}
	for host, want := range map[string]bool{"10.9.9.9": true, "[::1]": true, "192.0.2.1": false, "intranet.test": true, "nowhere.test": false} {
		if got := m.Match(&Request{Host: host, Resolve: resolve}); got != want {
			t.Errorf("dst %s: %v; want %v", host, got, want)
		}
	}
	if m.Match(&Request{Host: "intranet.test"}) {
		t.Error("a name matched dst without a resolver")
	}
	neg, _ := Compile(Spec{Dst: []string{"!10.0.0.0/8"}})
	if neg.Match(&Request{Host: "intranet.test", Resolve: resolve}) || !neg.Match(&Request{Host: "nowhere.test", Resolve: resolve}) {
		t.Error("negated dst")
	}
	if _, err := Compile(Spec{Dst: []string{"example.com"}}); err == nil || !strings.Contains(err.Error(), "dst") {
		t.Errorf("a name in dst: %v; want an error naming dst", err)
	}
}

// TestMatchDstResolvesOnce: many dst matchers over one request look the
// name up once.
func TestMatchDstResolvesOnce(t *testing.T) {
	var ms []*Matcher
	for _, c := range []string{"10.0.0.0/8", "192.0.2.0/24", "198.51.100.0/24"} {
		m, err := Compile(Spec{Dst: []string{c}})
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	lookups := 0
	r := &Request{Host: "intranet.test", Resolve: func(string) []netip.Addr {
		lookups++
		return []netip.Addr{netip.MustParseAddr("198.51.100.7")}
	}}
	matched := -1
	for i, m := range ms {
		if m.Match(r) {
			matched = i
			break
		}
	}
	if matched != 2 || lookups != 1 {
		t.Fatalf("matched %d with %d look-ups; want the third matcher and 1 look-up", matched, lookups)
	}
}

// TestMatchDomainsIgnoreCase: a host in capitals is the same host
// (Squid's dstdomain ignores case): a deny for .blocked.test is not
// side-stepped by writing the name in capitals.
func TestMatchDomainsIgnoreCase(t *testing.T) {
	m, err := Compile(Spec{Domains: []string{".blocked.test"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"WWW.Blocked.TEST", "blocked.TEST", "www.blocked.test"} {
		if !m.Match(&Request{Host: h}) {
			t.Errorf("%s does not match .blocked.test", h)
		}
	}
}
