package squidimport

// This file holds import-squid's translation of Squid's access controls:
// acl (src, dst, dstdomain, port, method, proxy_auth, url_regex,
// urlpath_regex, with values inline or in a quoted file), http_access into
// [[rule]], a lone "http_access deny DST-ACL" into [access] deny_to,
// never_direct/always_direct with ACLs and cache_peer_access /
// cache_peer_domain into [[route]]. It fails closed: an allow line it
// cannot express is dropped (the requests it admitted meet the later
// lines, and finally Squid's implicit deny), a deny line it cannot
// express is widened (its unexpressible conditions dropped), so the
// imported config never admits a request the squid.conf refused. Every
// such line is listed.

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/peerd/peerd/cmd/peerd/internal/config"
	"github.com/peerd/peerd/internal/match"
)

// squidACL is one named acl; lines with the same name add values.
type squidACL struct {
	typ    string
	flags  map[string]bool
	values []string
	// bad says why the acl cannot be expressed ("" when it can).
	bad string
}

// accessLine is one http_access (or never_direct, always_direct,
// cache_peer_access) line.
type accessLine struct {
	line  int
	allow bool
	acls  []string // "!name" negated
}

// importRule is a [[rule]] or [[route]] to write.
type importRule struct {
	line   int
	why    string // a comment: the rule stands for no line of squid.conf
	action string
	keys   map[string][]string
	peers  []string
	direct string
	routed bool // a route: peers are written even when empty
}

// builtinACLs are Squid's predefined ACLs (squid.conf may redefine them).
func builtinACLs() map[string]*squidACL {
	return map[string]*squidACL{
		"all":          {typ: "src", values: []string{"all"}},
		"localhost":    {typ: "src", values: []string{"127.0.0.1/32", "::1"}},
		"to_localhost": {typ: "dst", values: []string{"127.0.0.0/8", "0.0.0.0/32", "::1"}},
		"manager":      {typ: "url_regex", flags: map[string]bool{"-i": true}, values: []string{`^cache_object://`, `^https?://[^/]+/squid-internal-mgr/`}},
		"CONNECT":      {typ: "method", values: []string{"CONNECT"}},
	}
}

// acl reads "acl NAME TYPE [-i|-n|...] VALUE... | "FILE"".
func (s *squidImport) acl(n int, w []string) {
	if len(w) < 2 {
		s.note(n, "acl %s: no type", strings.Join(w, " "))
		return
	}
	name, typ := w[0], w[1]
	a := s.acls[name]
	if a == nil || s.builtin(name) {
		a = &squidACL{typ: typ, flags: map[string]bool{}}
		s.acls[name] = a
		s.defined = append(s.defined, name)
	}
	if a.typ != typ {
		a.bad = fmt.Sprintf("acl %s has two types (%s and %s)", name, a.typ, typ)
		return
	}
	rest := w[2:]
	for len(rest) > 0 && (strings.HasPrefix(rest[0], "-") || strings.HasPrefix(rest[0], "+")) && len(rest[0]) <= 2 {
		a.flags[rest[0]] = true
		rest = rest[1:]
	}
	for _, v := range rest {
		if len(v) > 1 && strings.HasPrefix(v, `"`) && strings.HasSuffix(v, `"`) {
			vals, err := readACLFile(strings.Trim(v, `"`))
			if err != nil {
				a.bad = fmt.Sprintf("acl %s: values from %s: %v", name, v, err)
				continue
			}
			a.values = append(a.values, vals...)
			continue
		}
		a.values = append(a.values, v)
	}
}

// builtin says whether name still has its predefined meaning.
func (s *squidImport) builtin(name string) bool {
	for _, d := range s.defined {
		if d == name {
			return false
		}
	}
	_, ok := builtinNames[name]
	return ok
}

// builtinNames are the names builtinACLs defines.
var builtinNames = func() map[string]bool {
	out := map[string]bool{}
	for n := range builtinACLs() {
		out[n] = true
	}
	return out
}()

// readACLFile reads a Squid ACL value file: one value per line (or several
// separated by blanks), # comments.
func readACLFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot be read here")
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		out = append(out, strings.Fields(line)...)
	}
	return out, sc.Err()
}

// condition is one acl as [[rule]] match values: the key and its values
// ("" key with no error: matches everything). wide says the values are
// for a deny (a regex may match more than Squid's), else for an allow
// (it may match less).
func (a *squidACL) condition(name string, wide, route bool) (string, []string, error) {
	if a.bad != "" {
		return "", nil, fmt.Errorf("%s", a.bad)
	}
	if len(a.values) == 0 {
		return "", nil, fmt.Errorf("acl %s has no values", name)
	}
	switch a.typ {
	case "src", "dst":
		if a.typ == "dst" {
			// peerd's dst resolves names in a [[rule]] (as Squid's dst
			// does) and matches addresses only in a [[route]] (as "dst -n"
			// does); where the two differ the result must lean the safe way.
			literal := a.flags["-n"]
			if route && !literal && wide || !route && literal && !wide {
				return "", nil, fmt.Errorf("acl %s: dst%s cannot be said exactly here", name, map[bool]string{true: " -n", false: ""}[literal])
			}
		}
		var out []string
		for _, v := range a.values {
			if v == "all" {
				if a.typ == "dst" {
					out = append(out, "0.0.0.0/0", "::/0")
					continue
				}
				return "", nil, nil
			}
			ps, err := squidCIDRs(v)
			if err != nil {
				return "", nil, fmt.Errorf("acl %s %s %q: %v", name, a.typ, v, err)
			}
			out = append(out, ps...)
		}
		return a.typ, out, nil
	case "proto":
		var out []string
		for _, v := range a.values {
			out = append(out, "(?i)^"+regexp.QuoteMeta(v)+"://")
		}
		return "urls", out, nil
	case "dstdomain":
		// A value no host name can be ("192.168.0.0/16", "*.example")
		// never matches in Squid either: it is left out, not the acl.
		var out []string
		for _, v := range a.values {
			switch {
			case strings.ContainsAny(v, " /*"):
				continue
			case v == "" || strings.Contains(v, ":"):
				return "", nil, fmt.Errorf("acl %s dstdomain %q is not a domain", name, v)
			}
			out = append(out, v)
		}
		if len(out) == 0 {
			return "", nil, fmt.Errorf("acl %s dstdomain: no value is a host name (%s)", name, strings.Join(a.values, " "))
		}
		return "domains", out, nil
	case "port":
		return "ports", a.values, nil
	case "method":
		return "methods", a.values, nil
	case "proxy_auth":
		var out []string
		for _, v := range a.values {
			if v == "REQUIRED" {
				v = "*"
			}
			out = append(out, v)
		}
		return "users", out, nil
	case "url_regex", "urlpath_regex":
		var out []string
		for _, v := range a.values {
			re := v
			if a.flags["-i"] {
				re = "(?i)" + re
			}
			if _, err := regexp.Compile(re); err != nil {
				return "", nil, fmt.Errorf("acl %s %s %q: not an RE2 expression", name, a.typ, v)
			}
			out = append(out, re)
		}
		if a.typ == "urlpath_regex" {
			return "paths", out, nil // matched on the unescaped path, as Squid does
		}
		return "urls", out, nil
	}
	if key, vals, ok, err := a.requestCondition(name); ok {
		return key, vals, err
	}
	if a.typ == "external" {
		return "", nil, fmt.Errorf("acl %s: an external acl asks a helper program, and peerd runs none (refused: say what it decides with other acls)", name)
	}
	return "", nil, fmt.Errorf("acl %s: type %s has no peerd equivalent", name, a.typ)
}

// checked refuses values peerd's matcher would refuse.
func checked(name, key string, vals []string) error {
	var sp match.Spec
	if f, ok := config.Fields(&sp)[key]; ok && f.Kind() == reflect.Slice {
		f.Set(reflect.ValueOf(vals))
	}
	if _, err := match.Compile(sp); err != nil {
		return fmt.Errorf("acl %s: %v", name, err)
	}
	return nil
}

// accessList reads "DIRECTIVE allow|deny ACL..." into its list.
func (s *squidImport) accessList(n int, directive string, w []string) *accessLine {
	if len(w) < 1 || (w[0] != "allow" && w[0] != "deny") {
		s.note(n, "%s %s: want allow or deny", directive, strings.Join(w, " "))
		return nil
	}
	return &accessLine{line: n, allow: w[0] == "allow", acls: w[1:]}
}

// lineRule translates one access line into match keys. For an allow, an
// unexpressible acl drops the line (ok false); for a deny, it is left out
// (the deny widens, and the note says to what: "denies every client"
// when nothing is left). never says the line can never match.
func (s *squidImport) lineRule(what string, l accessLine) (keys map[string][]string, ok, never bool) {
	keys = map[string][]string{}
	positive := map[string]bool{}
	var widened []string
	for _, tok := range l.acls {
		name, neg := strings.CutPrefix(tok, "!")
		a := s.acls[name]
		var key string
		var vals []string
		var err error
		if a == nil {
			err = fmt.Errorf("acl %s is not defined", name)
		} else {
			// A deny widens with its positive conditions and narrows
			// with its negated ones; an allow the other way round.
			key, vals, err = a.condition(name, !l.allow != neg, what != "http_access")
		}
		if err == nil && key != "" {
			err = checked(name, key, vals)
		}
		if err == nil && key == "" { // "all"
			if neg {
				return nil, true, true
			}
			continue
		}
		if err == nil && neg && key == "users" {
			err = fmt.Errorf("a negated proxy_auth acl (%s) has no peerd equivalent", name)
		}
		if err == nil && neg && intKeys[key] {
			err = fmt.Errorf("a negated %s acl (%s) has no peerd equivalent", a.typ, name)
		}
		if err == nil && !neg && positive[key] {
			err = fmt.Errorf("two %s acls in one line (%s) would need their intersection", key, name)
		}
		if err != nil {
			if l.allow {
				s.note(l.line, "%s allow %s: not carried over (%v); the requests it admitted meet the lines after it", what, strings.Join(l.acls, " "), err)
				s.lossyAccess(what, l.line)
				return nil, false, false
			}
			widened = append(widened, err.Error())
			continue
		}
		if neg {
			for _, v := range vals {
				keys[key] = append(keys[key], "!"+v)
			}
			continue
		}
		positive[key] = true
		keys[key] = append(keys[key], vals...)
	}
	if len(widened) > 0 {
		line := fmt.Sprintf("%s deny %s", what, strings.Join(l.acls, " "))
		switch {
		case len(keys) > 0:
			s.note(l.line, "%s: %s; widened to the rest of the line: this rule denies every request that matches %s", line, strings.Join(widened, "; "), describeKeys(keys))
		case what == "http_access":
			s.note(l.line, "%s: %s; widened to the rest of the line, and nothing is left: this rule denies every client, and no line after it is reached", line, strings.Join(widened, "; "))
		default:
			s.note(l.line, "%s: %s; widened to the rest of the line, and nothing is left: this line matches every request", line, strings.Join(widened, "; "))
		}
		s.lossyAccess(what, l.line)
	}
	return keys, true, false
}

// describeKeys says in words what match keys select ("src 10.0.0.0/8
// and domains .example.com").
func describeKeys(keys map[string][]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		parts = append(parts, k+" "+strings.Join(keys[k], " "))
	}
	return strings.Join(parts, " and ")
}

// httpAccess translates the http_access lines into [[rule]]s (and a lone
// "deny DST-ACL" into deny_to), ending with Squid's implicit last rule,
// which the import says in words: with no http_access line Squid denies
// every request; after the last line, it does the opposite of that
// line's action (a last deny lets the rest in, a last allow shuts it
// out), whatever became of the line itself here.
func (s *squidImport) httpAccess() {
	if len(s.httpAccessLines) == 0 {
		s.say("no http_access line: Squid denies every request, and so does this config (the last [[rule]])")
		s.rules = append(s.rules, importRule{action: "deny", why: "Squid's rule when squid.conf has no http_access line: deny every request"})
		return
	}
	for _, l := range s.httpAccessLines {
		if s.accessPorts(l) {
			continue
		}
		if !l.allow && len(l.acls) == 1 {
			if a := s.acls[l.acls[0]]; a != nil && a.typ == "dst" && a.bad == "" && s.denyToAll(a) {
				continue
			}
		}
		keys, ok, never := s.lineRule("http_access", l)
		if !ok || never {
			continue
		}
		action := "deny"
		if l.allow {
			action = "allow"
		}
		s.rules = append(s.rules, importRule{line: l.line, action: action, keys: keys})
	}
	if s.connectPorts != nil && s.safePorts != nil {
		s.connectPorts = within(s.connectPorts, s.safePorts) // Squid checks both
	}
	last := s.httpAccessLines[len(s.httpAccessLines)-1]
	if last.allow {
		s.say("%s is an allow: Squid denies what no line matched, and so does this config (the last [[rule]])", s.where(last.line))
		s.rules = append(s.rules, importRule{action: "deny", why: "Squid's implicit last rule: the opposite of the last http_access line (" + s.where(last.line) + ", an allow)"})
		return
	}
	// peerd allows what no [[rule]] matched, as Squid does after a deny.
	s.say("%s is a deny: Squid allows what no line matched, and so does this config (peerd allows a request no [[rule]] matches)", s.where(last.line))
}

// denyToAll puts a dst acl's addresses into [access] deny_to, when every
// value is an address or CIDR.
func (s *squidImport) denyToAll(a *squidACL) bool {
	var out []string
	for _, v := range a.values {
		p, err := squidCIDR(v)
		if err != nil {
			return false
		}
		out = append(out, p)
	}
	s.denyTo = append(s.denyTo, out...)
	return true
}

// accessPorts maps Squid's "deny !Safe_ports" onto [access] safe_ports
// and "deny CONNECT !SSL_ports" onto connect_ports (the [access] check
// comes after the rules: where an allow line came first in squid.conf,
// the result is stricter than Squid, never looser).
func (s *squidImport) accessPorts(l accessLine) bool {
	if l.allow {
		return false
	}
	portACL := func(tok string) []string {
		name, neg := strings.CutPrefix(tok, "!")
		a := s.acls[name]
		if !neg || a == nil || a.typ != "port" || a.bad != "" || len(a.values) == 0 || checked(name, "ports", a.values) != nil {
			return nil
		}
		for _, v := range a.values {
			if strings.HasPrefix(v, "!") {
				return nil
			}
		}
		return a.values
	}
	switch {
	case len(l.acls) == 1 && s.safePorts == nil:
		if v := portACL(l.acls[0]); v != nil {
			s.safePorts = v
			return true
		}
	case len(l.acls) == 2 && s.connectPorts == nil:
		if a := s.acls[l.acls[0]]; a != nil && a.typ == "method" && len(a.values) == 1 && a.values[0] == "CONNECT" {
			if v := portACL(l.acls[1]); v != nil {
				s.connectPorts = v
				return true
			}
		}
	}
	return false
}

// within keeps the ports or ranges of a that lie wholly inside one of b's.
func within(a, b []string) []string {
	bounds := func(v string) (int, int) {
		lo, hi, ok := strings.Cut(v, "-")
		l, _ := strconv.Atoi(lo)
		h := l
		if ok {
			h, _ = strconv.Atoi(hi)
		}
		return l, h
	}
	out := []string{}
	for _, x := range a {
		xl, xh := bounds(x)
		for _, y := range b {
			if yl, yh := bounds(y); xl >= yl && xh <= yh {
				out = append(out, x)
				break
			}
		}
	}
	return out
}
