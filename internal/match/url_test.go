package match

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// TestRulesSeeTheRequestAsSquidDoes: a deny on a URL, a path or a method
// is not passed by another spelling of the same request (contract 18:
// scheme and host lower-cased, the default port dropped, the path
// unescaped, the method without regard to case).
func TestRulesSeeTheRequestAsSquidDoes(t *testing.T) {
	secret, _ := Compile(Spec{URLs: []string{`^http://regex\.example/secret`}})
	exe, _ := Compile(Spec{Paths: []string{`\.exe$`}})
	rooted, _ := Compile(Spec{Paths: []string{`^/admin/`}})
	put, _ := Compile(Spec{Methods: []string{"PUT"}})
	notGet, _ := Compile(Spec{Methods: []string{"!GET"}})
	for _, tc := range []struct {
		m      *Matcher
		url    string
		method string
		want   bool
	}{
		{secret, "http://regex.example/secret", "GET", true},
		{secret, "http://REGEX.example/secret", "GET", true},
		{secret, "HTTP://regex.example/secret", "GET", true},
		{secret, "http://regex.example:80/secret", "GET", true},
		{secret, "http://regex.example:0080/secret", "GET", true},
		{secret, "http://regex.example/%73ecret", "GET", true},
		{secret, "http://regex.example/%73%65cret", "GET", true},
		{secret, "http://regex.example:8080/secret", "GET", false},
		{secret, "https://regex.example/secret", "GET", false},
		{secret, "http://regex.example/public", "GET", false},
		{exe, "http://a.example/setup.exe", "GET", true},
		{exe, "http://a.example/setup%2Eexe", "GET", true},
		{exe, "http://a.example/setup.ex%65", "GET", true},
		{exe, "http://a.example/setup.exe?x=1", "GET", false}, // Squid's path holds the query
		{exe, "http://a.example/setup.zip", "GET", false},
		{exe, "a.example:443", "CONNECT", false}, // CONNECT has no path
		{rooted, "http://a.example/admin/x", "GET", true},
		{rooted, "http://a.example/%61dmin/x", "GET", true},
		{rooted, "http://a.example/x/admin/", "GET", false},
		{put, "http://a.example/", "PUT", true},
		{put, "http://a.example/", "put", true},
		{put, "http://a.example/", "Put", true},
		{put, "http://a.example/", "POST", false},
		{notGet, "http://a.example/", "get", false},
		{notGet, "http://a.example/", "post", true},
	} {
		r := &Request{URL: tc.url, Method: tc.method}
		if got := tc.m.Match(r); got != tc.want {
			t.Errorf("%s %s: %v; want %v", tc.method, tc.url, got, tc.want)
		}
	}
	if _, err := Compile(Spec{Paths: []string{"(x"}}); err == nil || !strings.Contains(err.Error(), "paths") {
		t.Errorf("a bad path expression: %v; want an error naming paths", err)
	}
}

func TestCanonicalURL(t *testing.T) {
	for raw, want := range map[string][2]string{
		"http://Example.COM/A%2fB?Q=%41":  {"http://example.com/A/B?Q=A", "/A/B?Q=A"},
		"HTTPS://x.example:443/":          {"https://x.example/", "/"},
		"https://x.example:80/":           {"https://x.example:80/", "/"},
		"http://x.example":                {"http://x.example/", "/"},
		"http://x.example?q":              {"http://x.example/?q", "/?q"},
		"http://x.example:/p":             {"http://x.example/p", "/p"},
		"http://[::1]:80/p":               {"http://[::1]/p", "/p"},
		"http://[::1]/p":                  {"http://[::1]/p", "/p"},
		"http://x/%00%zz%%41%4":           {"http://x/%00%zz%41%4", "/%00%zz%41%4"},
		"Example.COM:443":                 {"example.com:443", ""},
		"ftp://files.example:21/pub/":     {"ftp://files.example/pub/", "/pub/"},
		"http://x.example/caf%C3%A9/menu": {"http://x.example/caf\xc3\xa9/menu", "/caf\xc3\xa9/menu"},
	} {
		uri, path := CanonicalURL(raw)
		if uri != want[0] || path != want[1] {
			t.Errorf("%s: %q %q; want %q %q", raw, uri, path, want[0], want[1])
		}
	}
}

// referenceURL is CanonicalURL written another way, for the differential
// fuzz target: net/url splits the URI, and Squid's rfc1738_unescape is
// read as "decode every %XX but %00, and %% to %".
func referenceURL(raw string) (string, string, bool) {
	if !strings.Contains(raw, "://") {
		return strings.ToLower(raw), "", true
	}
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" || u.User != nil || u.Fragment != "" || strings.Contains(raw, "#") {
		return "", "", false
	}
	scheme := strings.ToLower(u.Scheme)
	host := strings.ToLower(u.Hostname())
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			return "", "", false
		}
		if d := map[string]int{"http": 80, "https": 443, "ftp": 21}[scheme]; d != n {
			host += ":" + strconv.Itoa(n)
		}
	}
	pq := u.EscapedPath()
	if u.RawPath == "" && u.Path != "" {
		// net/url re-escaped nothing: the path as written is RawPath-less.
		pq = raw[strings.Index(raw, "://")+3:]
		if i := strings.IndexAny(pq, "/?"); i >= 0 {
			pq = pq[i:]
		} else {
			pq = ""
		}
		if i := strings.IndexByte(pq, '?'); i >= 0 {
			pq = pq[:i]
		}
	}
	if u.ForceQuery || u.RawQuery != "" {
		pq += "?" + u.RawQuery
	}
	if !strings.HasPrefix(pq, "/") {
		pq = "/" + pq
	}
	var out []byte
	for i := 0; i < len(pq); i++ {
		if pq[i] == '%' && i+1 < len(pq) && pq[i+1] == '%' {
			out = append(out, '%')
			i++
			continue
		}
		if pq[i] == '%' && i+2 < len(pq) {
			if v, err := strconv.ParseUint(pq[i+1:i+3], 16, 8); err == nil && v != 0 && !strings.ContainsAny(pq[i+1:i+3], "+-") {
				out = append(out, byte(v))
				i += 2
				continue
			}
		}
		out = append(out, pq[i])
	}
	return scheme + "://" + host + string(out), string(out), true
}

// FuzzCanonicalURL: CanonicalURL agrees with the net/url reference on
// every absolute URI h1 accepts as a request target (both sides of a
// port, case, escape and bracket), and never panics on anything else.
func FuzzCanonicalURL(f *testing.F) {
	for _, s := range []string{"http://Example.COM/A%2fB?Q=%41", "HTTPS://x:443/", "http://x", "http://x?q", "http://[::1]:80/p",
		"http://x/%00%zz%%41%4", "Example.COM:443", "http://x:0080/%73ecret", "http://x/a%2", "ftp://f:21/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		uri, path := CanonicalURL(raw)
		if !strings.HasSuffix(uri, path) {
			t.Fatalf("%q: path %q is not the end of %q", raw, path, uri)
		}
		if !acceptedTarget(raw) {
			return
		}
		ru, rp, ok := referenceURL(raw)
		if !ok {
			return
		}
		if uri != ru || path != rp {
			t.Fatalf("%q: got %q %q; the reference %q %q", raw, uri, path, ru, rp)
		}
	})
}

// acceptedTarget approximates what h1 lets through as an absolute URI:
// printable ASCII, valid escapes, an http(s) or ftp scheme, a host of
// name characters or a bracketed address, and a decimal port.
func acceptedTarget(raw string) bool {
	i := strings.Index(raw, "://")
	if i <= 0 {
		return false
	}
	switch strings.ToLower(raw[:i]) {
	case "http", "https", "ftp":
	default:
		return false
	}
	rest := raw[i+3:]
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	host, port := splitPort(rest[:end])
	if host == "" || (strings.HasPrefix(host, "[") != strings.HasSuffix(host, "]")) {
		return false
	}
	for _, c := range strings.Trim(host, "[]") {
		if !(c == '.' || c == '-' || c == ':' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		return false
	}
	for _, c := range port {
		if c < '0' || c > '9' {
			return false
		}
	}
	if len(port) > 5 {
		return false
	}
	pq := rest[end:]
	for j := 0; j < len(pq); j++ {
		c := pq[j]
		if c <= ' ' || c >= 0x7f || c == '#' || c == '\\' || c == '"' || c == '<' || c == '>' || c == '^' || c == '`' || c == '{' || c == '|' || c == '}' {
			return false
		}
		if c == '%' && (j+2 >= len(pq) || fromHex(pq[j+1]) < 0 || fromHex(pq[j+2]) < 0) {
			return false
		}
	}
	return true
}
