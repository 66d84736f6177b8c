// Package match is the request matcher of [[rule]] and [[route]]
// (contract section 18): destination domains with Squid's dstdomain
// semantics, client addresses, ports, methods, users and URL and path
// regular expressions (Squid url_regex and urlpath_regex, which
// import-squid needs to carry a squid.conf's "deny manager" over
// faithfully). Rules see the request as Squid's ACLs do: the URL
// rebuilt (url.go), the method without regard to case. A key that is
// absent matches everything; a value written "!v" excludes what v names,
// so Squid's negated ACLs carry over. Compiled once per config: a domain
// is found in O(labels), whatever the number of domains.
package match

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Spec is what a [[rule]] or [[route]] table says to match.
type Spec struct {
	Domains []string `toml:"domains"`
	Src     []string `toml:"src"`
	Ports   []string `toml:"ports"`
	Methods []string `toml:"methods"`
	Users   []string `toml:"users"`
	// Dst are destination addresses (Squid dst): matched against the
	// host when it is an address, else against what the name resolves to
	// (when the request can resolve; a name that does not resolve
	// matches no address).
	Dst []string `toml:"dst"`
	// URLs are regular expressions (RE2; "(?i)" for Squid's -i) matched
	// against the absolute URI as Squid's url_regex sees it
	// (CanonicalURL), or host:port for CONNECT.
	URLs []string `toml:"urls"`
	// Paths are regular expressions matched against the URL's path and
	// query, unescaped (Squid urlpath_regex); CONNECT has no path.
	Paths []string `toml:"paths"`
	// The keys of Squid's browser, referer_regex, req_header, time,
	// maxconn and max_user_ip ACLs: see extra.go.
	UserAgents []string `toml:"user_agents"`
	Referers   []string `toml:"referers"`
	Headers    []string `toml:"headers"`
	Times      []string `toml:"times"`
	MaxConn    int      `toml:"max_conn"`
	MaxUserIP  int      `toml:"max_user_ip"`
}

// Request is what a request offers to match.
type Request struct {
	Host   string // the destination host, canonical (no trailing dot; any case)
	Client netip.Addr
	Port   int
	Method string // any case: matched without regard to it
	User   string // "" when not authenticated
	URL    string // the absolute URI (its host canonical); host:port for CONNECT
	// Resolve, when set, looks a host name up for dst (called only when a
	// matcher with dst meets a name, and once per Request however many
	// matchers ask).
	Resolve func(host string) []netip.Addr
	// Now and Facts are what extra.go's keys look at (Facts nil: none).
	Now   time.Time
	Facts Facts

	resolved bool
	addrs    []netip.Addr
	lowered  bool
	canon    bool
	uri      string // CanonicalURL's, once asked
	path     string
}

// canonical is the URL and path as url and path rules see them, built
// once and only when a matcher asks.
func (r *Request) canonical() (string, string) {
	if !r.canon {
		r.canon = true
		r.uri, r.path = CanonicalURL(r.URL)
	}
	return r.uri, r.path
}

// method is the method as the matcher's sets hold it: in capitals (a
// method already in capitals, the common case, is not copied).
func (r *Request) method() string {
	for i := 0; i < len(r.Method); i++ {
		if c := r.Method[i]; 'a' <= c && c <= 'z' {
			return strings.ToUpper(r.Method)
		}
	}
	return r.Method
}

// lowerHost makes Host lower case once (names are compared without case;
// a host already in lower case is kept without a copy).
func (r *Request) lowerHost() string {
	if !r.lowered {
		r.lowered = true
		r.Host = strings.ToLower(r.Host)
	}
	return r.Host
}

// destination is the host's address, or what the name resolves to
// (looked up once and kept in r).
func (r *Request) destination() []netip.Addr {
	if !r.resolved {
		r.resolved = true
		if a, err := netip.ParseAddr(strings.Trim(r.Host, "[]")); err == nil {
			r.addrs = []netip.Addr{a}
		} else if r.Resolve != nil {
			r.addrs = r.Resolve(r.Host)
		}
	}
	return r.addrs
}

// Matcher is a compiled Spec.
type Matcher struct {
	domains, notDomains domainSet
	src, notSrc         []netip.Prefix
	ports, notPorts     []portRange
	methods, notMethods map[string]bool
	users, notUsers     map[string]bool
	anyUser             bool // users = ["*"]: any authenticated user (Squid REQUIRED)
	urls, notURLs       []*regexp.Regexp
	paths, notPaths     []*regexp.Regexp
	dst, notDst         []netip.Prefix
	x                   *extra // nil: no key of extra.go
	has                 [nKeys]bool
}

// The keys, as indexes of Matcher.has.
const (
	kDomains = iota
	kSrc
	kPorts
	kMethods
	kUsers
	kURLs
	kDst
	kPaths
	nKeys
)

type portRange struct{ lo, hi int }

// domainSet holds exact names and ".suffix" names.
type domainSet struct {
	exact, suffix map[string]bool
}

func (d *domainSet) add(v string) {
	v = strings.ToLower(strings.TrimRight(v, "."))
	if d.exact == nil {
		d.exact, d.suffix = map[string]bool{}, map[string]bool{}
	}
	if strings.HasPrefix(v, ".") {
		d.suffix[v[1:]] = true // ".example.com": it and every subdomain
		return
	}
	d.exact[v] = true
}

// has reports whether host is in the set: O(labels).
func (d *domainSet) has(host string) bool {
	if d.exact == nil {
		return false
	}
	if d.exact[host] || d.suffix[host] {
		return true
	}
	for i := 0; i < len(host); i++ {
		if host[i] == '.' && d.suffix[host[i+1:]] {
			return true
		}
	}
	return false
}

func (d *domainSet) empty() bool { return len(d.exact) == 0 && len(d.suffix) == 0 }

// Compile checks s and builds its matcher; errors name the key.
func Compile(s Spec) (*Matcher, error) {
	m := &Matcher{}
	split := func(v string) (string, bool) {
		if strings.HasPrefix(v, "!") {
			return v[1:], true
		}
		return v, false
	}
	for _, v := range s.Domains {
		v, neg := split(v)
		if v == "" || strings.ContainsAny(v, " /:") {
			return nil, fmt.Errorf("domains: %q is not a domain (e.g. example.com or .example.com)", v)
		}
		if neg {
			m.notDomains.add(v)
		} else {
			m.domains.add(v)
		}
	}
	var err error
	if m.src, m.notSrc, err = prefixes("src", s.Src); err != nil {
		return nil, err
	}
	for _, v := range s.Ports {
		v, neg := split(v)
		lo, hi, ok := strings.Cut(v, "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if ok {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 1 || b > 65535 || a > b {
			return nil, fmt.Errorf("ports: %q is not a port or range (e.g. 443 or 1025-65535)", v)
		}
		if neg {
			m.notPorts = append(m.notPorts, portRange{a, b})
		} else {
			m.ports = append(m.ports, portRange{a, b})
		}
	}
	for _, v := range s.Methods {
		v, neg := split(v)
		if v == "" || strings.ToUpper(v) != v || strings.ContainsAny(v, " \t") {
			return nil, fmt.Errorf("methods: %q is not a method in capitals (e.g. GET or CONNECT)", v)
		}
		if neg {
			m.notMethods = set(m.notMethods, v)
		} else {
			m.methods = set(m.methods, v)
		}
	}
	for _, v := range s.Users {
		v, neg := split(v)
		if v == "" {
			return nil, fmt.Errorf("users: an empty user name")
		}
		switch {
		case v == "*" && !neg:
			m.anyUser = true
		case neg:
			m.notUsers = set(m.notUsers, v)
		default:
			m.users = set(m.users, v)
		}
	}
	if m.urls, m.notURLs, err = regexps("urls", s.URLs); err != nil {
		return nil, err
	}
	if m.paths, m.notPaths, err = regexps("paths", s.Paths); err != nil {
		return nil, err
	}
	if m.dst, m.notDst, err = prefixes("dst", s.Dst); err != nil {
		return nil, err
	}
	if m.x, err = compileExtra(s); err != nil {
		return nil, err
	}
	m.has = [nKeys]bool{kDomains: len(s.Domains) > 0, kSrc: len(s.Src) > 0, kPorts: len(s.Ports) > 0, kMethods: len(s.Methods) > 0,
		kUsers: len(s.Users) > 0 || s.MaxUserIP > 0, kURLs: len(s.URLs) > 0, kDst: len(s.Dst) > 0, kPaths: len(s.Paths) > 0}
	return m, nil
}

// regexps compiles a key's expressions, and the negated ones.
func regexps(key string, vals []string) (in, out []*regexp.Regexp, err error) {
	for _, v := range vals {
		v, neg := strings.CutPrefix(v, "!")
		re, err := regexp.Compile(v)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %q: %v", key, v, err)
		}
		if neg {
			out = append(out, re)
		} else {
			in = append(in, re)
		}
	}
	return in, out, nil
}

// prefixes reads a key's addresses and CIDRs, and the negated ones.
func prefixes(key string, vals []string) (in, out []netip.Prefix, err error) {
	for _, v := range vals {
		v, neg := strings.CutPrefix(v, "!")
		p, err := parsePrefix(v)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %q is not an address or CIDR", key, v)
		}
		if neg {
			out = append(out, p)
		} else {
			in = append(in, p)
		}
	}
	return in, out, nil
}

// parsePrefix reads a CIDR or a single address.
func parsePrefix(v string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(v)
	if err != nil {
		a, aerr := netip.ParseAddr(v)
		if aerr != nil {
			return p, aerr
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	return p.Masked(), nil
}

func set(m map[string]bool, v string) map[string]bool {
	if m == nil {
		m = map[string]bool{}
	}
	m[v] = true
	return m
}

// Match reports whether r matches every key of the matcher.
func (m *Matcher) Match(r *Request) bool {
	return m.MatchButUser(r) && m.MatchUser(r)
}

// NeedsUser reports whether the matcher has a users key: it can match
// only an authenticated request.
func (m *Matcher) NeedsUser() bool { return m.has[kUsers] }

// MatchUser reports whether r's user matches the users key (true when
// the matcher has none).
func (m *Matcher) MatchUser(r *Request) bool {
	if !m.has[kUsers] {
		return true
	}
	if r.User == "" || m.notUsers[r.User] || (m.x != nil && !m.x.matchUser(r)) {
		return false
	}
	return m.anyUser || len(m.users) == 0 || m.users[r.User]
}

// MatchButUser reports whether r matches every key but users: a rule
// that needs the user asks for credentials only when the rest matched
// (as Squid evaluates an http_access line's ACLs in order, proxy_auth
// last).
func (m *Matcher) MatchButUser(r *Request) bool {
	if m.has[kDomains] {
		host := r.lowerHost()
		if (!m.domains.empty() && !m.domains.has(host)) || m.notDomains.has(host) {
			return false
		}
	}
	if m.has[kSrc] {
		if (len(m.src) > 0 && !inPrefixes(m.src, r.Client)) || inPrefixes(m.notSrc, r.Client) {
			return false
		}
	}
	if m.has[kPorts] {
		if (len(m.ports) > 0 && !inPorts(m.ports, r.Port)) || inPorts(m.notPorts, r.Port) {
			return false
		}
	}
	if m.has[kMethods] {
		method := r.method()
		if (len(m.methods) > 0 && !m.methods[method]) || m.notMethods[method] {
			return false
		}
	}
	if m.has[kURLs] {
		uri, _ := r.canonical()
		if (len(m.urls) > 0 && !anyMatch(m.urls, uri)) || anyMatch(m.notURLs, uri) {
			return false
		}
	}
	if m.has[kPaths] {
		_, path := r.canonical()
		if (len(m.paths) > 0 && !anyMatch(m.paths, path)) || anyMatch(m.notPaths, path) {
			return false
		}
	}
	if m.has[kDst] && !m.matchDst(r) {
		return false
	}
	return m.x == nil || m.x.match(r)
}

// matchDst: the host's address (or, for a name, any address it resolves
// to) is in dst and none is in the negated dst.
func (m *Matcher) matchDst(r *Request) bool {
	in := len(m.dst) == 0
	for _, a := range r.destination() {
		if inPrefixes(m.notDst, a) {
			return false
		}
		if inPrefixes(m.dst, a) {
			in = true
		}
	}
	return in
}

func anyMatch(res []*regexp.Regexp, s string) bool {
	for _, re := range res {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}

func inPrefixes(ps []netip.Prefix, a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func inPorts(rs []portRange, p int) bool {
	for _, r := range rs {
		if p >= r.lo && p <= r.hi {
			return true
		}
	}
	return false
}

// DomainsOnly returns the domains of a matcher whose only key is
// positive domains (for an index over many such matchers).
func (m *Matcher) DomainsOnly() (exact, suffix []string, ok bool) {
	if m.has != [nKeys]bool{kDomains: true} || !m.notDomains.empty() || m.x != nil {
		return nil, nil, false
	}
	for d := range m.domains.exact {
		exact = append(exact, d)
	}
	for d := range m.domains.suffix {
		suffix = append(suffix, d)
	}
	return exact, suffix, true
}

// DomainIndex finds, among many domain lists, the first (lowest numbered)
// that holds a host, in O(labels) whatever the number of lists.
type DomainIndex struct {
	exact, suffix map[string]int
}

// Add files list i's domains (exact names and ".suffix" names without
// the dot); a domain already filed keeps its lower number.
func (x *DomainIndex) Add(i int, exact, suffix []string) {
	if x.exact == nil {
		x.exact, x.suffix = map[string]int{}, map[string]int{}
	}
	for _, d := range exact {
		if j, ok := x.exact[d]; !ok || i < j {
			x.exact[d] = i
		}
	}
	for _, d := range suffix {
		if j, ok := x.suffix[d]; !ok || i < j {
			x.suffix[d] = i
		}
	}
}

// Lookup is the lowest list number holding host, -1 for none.
func (x *DomainIndex) Lookup(host string) int {
	best := -1
	take := func(i int, ok bool) {
		if ok && (best < 0 || i < best) {
			best = i
		}
	}
	if x.exact == nil {
		return -1
	}
	i, ok := x.exact[host]
	take(i, ok)
	i, ok = x.suffix[host]
	take(i, ok)
	for k := 0; k < len(host); k++ {
		if host[k] == '.' {
			i, ok = x.suffix[host[k+1:]]
			take(i, ok)
		}
	}
	return best
}
