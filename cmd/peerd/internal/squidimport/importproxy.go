package squidimport

// This file holds the squid.conf directives that are one peerd key each
// beyond those of the contract's list (and a few whose value is what
// peerd always does): the client and next-hop timeouts,
// shutdown_lifetime, forwarded_for, via, pid_filename,
// collapsed_forwarding, quick_abort_*, dead_peer_timeout,
// tcp_outgoing_address, "cache deny all" (no caching at all) and
// "request_header_access NAME deny all" (request_header_remove).

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/peerd/peerd/forwarding"
	"github.com/peerd/peerd/internal/conf"
)

// squidProxyKeys maps each such directive to its [proxy] key, in the
// order they are written.
var squidProxyKeys = []struct{ directive, key string }{
	{"read_timeout", "read_timeout"},
	{"request_timeout", "request_timeout"},
	{"request_start_timeout", "request_start_timeout"},
	{"client_idle_pconn_timeout", "client_idle_timeout"},
	{"persistent_request_timeout", "client_idle_timeout"}, // its older name
	{"write_timeout", "write_timeout"},
	{"shutdown_lifetime", "shutdown_timeout"},
	{"forwarded_for", "forwarded_for"},
	{"via", "via"},
	{"pid_filename", "pid_file"},
	{"tcp_outgoing_address", "outgoing_address"}, // read by proxyDirective's own case
}

// proxySetting is one [proxy] key read from a directive: its TOML value
// and the line it came from, for the comment beside it.
type proxySetting struct {
	value, from string
}

// proxyDirective reads one of the directives this file holds, and
// reports whether w was one (false: the caller lists the line). Squid
// keeps the last of repeated lines, and the first tcp_outgoing_address
// that matches; so does this.
func (s *squidImport) proxyDirective(n int, w []string) (bool, error) {
	switch w[0] {
	case "collapsed_forwarding":
		on, err := squidOnOff(w)
		if err == nil {
			s.collapse = fmt.Sprint(on)
		}
		return true, err
	case "cache", "no_cache": // no_cache is its older name
		s.cacheRule(n, w)
		return true, nil
	case "request_header_access":
		s.requestHeaderAccess(n, w)
		return true, nil
	case "quick_abort_min", "quick_abort_max", "quick_abort_pct":
		return true, s.quickAbort(w)
	case "minimum_object_size", "server_persistent_connections", "client_persistent_connections":
		// What peerd always does needs no key: objects of any size are
		// stored, and connections on both sides are kept alive.
		if v := strings.Join(w[1:], " "); v == "on" || strings.HasPrefix(v, "0 ") || v == "0" {
			return true, nil
		}
		return false, nil
	case "tcp_outgoing_address":
		// Without ACLs (or "all") it is every connection's; one for some
		// requests only is listed.
		if len(w) < 2 {
			return false, nil
		}
		if a, err := netip.ParseAddr(w[1]); err == nil && !a.IsUnspecified() && (len(w) == 2 || (len(w) == 3 && w[2] == "all")) {
			if _, ok := s.proxyKeys["outgoing_address"]; !ok { // Squid takes the first that matches
				s.setProxyKey("outgoing_address", tomlString(w[1]), w)
			}
			return true, nil
		}
		return false, nil
	case "dead_peer_timeout":
		d, err := squidDuration(w[1:])
		if err != nil || d < 0 {
			return true, fmt.Errorf("dead_peer_timeout %q: want a positive time", strings.Join(w[1:], " "))
		}
		if d == 0 {
			s.note(n, "dead_peer_timeout %s: peerd needs a positive dead_peer_timeout; its default is kept", strings.Join(w[1:], " "))
			return true, nil
		}
		s.deadPeerTimeout = d
		return true, nil
	}
	key := ""
	for _, k := range squidProxyKeys {
		if k.directive == w[0] {
			key = k.key
		}
	}
	if key == "" {
		return false, nil
	}
	var value string
	switch w[0] {
	case "forwarded_for":
		mode := ""
		if len(w) > 1 {
			mode = w[1]
		}
		if err := proxyCheck(func(c *forwarding.Config) { c.ForwardedFor = mode }); err != nil {
			return true, fmt.Errorf("forwarded_for %q: %v", mode, err)
		}
		value = tomlString(mode)
	case "pid_filename":
		if len(w) != 2 {
			return true, fmt.Errorf("pid_filename: want one path (or none)")
		}
		// Not copied: peerd beside the Squid it replaces would write the
		// same file, each overwriting the other's pid.
		delete(s.proxyKeys, key)
		if w[1] != "none" {
			s.note(n, "pid_filename %s: not carried over (peerd beside Squid would overwrite Squid's pid file): set [proxy] pid_file to a file of peerd's own", w[1])
		}
		return true, nil
	case "via":
		on, err := squidOnOff(w)
		if err != nil {
			return true, err
		}
		value = fmt.Sprint(on)
	default:
		d, err := squidDuration(w[1:])
		if err != nil {
			return true, fmt.Errorf("%s: %v", w[0], err)
		}
		if d <= 0 {
			// Squid reads 0 as "no wait at all" or "never"; peerd's
			// timeouts are all positive, and its own default stands.
			s.note(n, "%s: peerd needs a positive %s; its default is kept", strings.Join(w, " "), key)
			return true, nil
		}
		value = tomlString(d.String())
	}
	s.setProxyKey(key, value, w)
	return true, nil
}

// setProxyKey sets a [proxy] key read from the directive w.
func (s *squidImport) setProxyKey(key, value string, w []string) {
	if s.proxyKeys == nil {
		s.proxyKeys = map[string]proxySetting{}
	}
	s.proxyKeys[key] = proxySetting{value: value, from: strings.Join(w, " ")}
}

// proxyCheck is what forwarding's own Validate says of the default
// [proxy] section with one setting changed by set: the words and field
// names peerd takes are checked where they are defined, not listed again.
func proxyCheck(set func(*forwarding.Config)) error {
	c := forwarding.DefaultConfig()
	set(&c)
	return c.Validate()
}

// squidOnOff reads a directive's "on" or "off".
func squidOnOff(w []string) (bool, error) {
	if len(w) == 2 && (w[1] == "on" || w[1] == "off") {
		return w[1] == "on", nil
	}
	return false, fmt.Errorf("%s: want on or off, got %q", w[0], strings.Join(w[1:], " "))
}

// renderProxyKeys writes the [proxy] keys read by proxyDirective, each
// with the line it came from.
func (s *squidImport) renderProxyKeys(b *strings.Builder) {
	if len(s.removeFields) > 0 {
		writeList(b, "request_header_remove", s.removeFields)
	}
	done := map[string]bool{}
	for _, k := range squidProxyKeys {
		v, ok := s.proxyKeys[k.key]
		if !ok || done[k.key] {
			continue
		}
		done[k.key] = true
		fmt.Fprintf(b, "%s = %s  # %s\n", k.key, v.value, conf.Printable(v.from))
	}
}

// cacheRule reads a "cache allow|deny ACL..." line. The first one decides
// what Squid does with a request that matches everything: "cache deny
// all" first stores nothing, which peerd says with memory = "0"; "cache
// allow all" first is Squid's default. Any other rule stores some
// requests and not others, which peerd cannot say: it is listed.
func (s *squidImport) cacheRule(n int, w []string) {
	first := !s.cacheRuleSeen
	s.cacheRuleSeen = true
	switch {
	case first && len(w) == 3 && w[2] == "all" && w[1] == "deny":
		s.cacheOff = true
	case first && len(w) == 3 && w[2] == "all" && w[1] == "allow":
	case !s.cacheOff:
		s.note(n, "%s: peerd stores what RFC 9111 allows, for every request", strings.Join(w, " "))
	}
}

// requestHeaderAccess reads "request_header_access NAME allow|deny
// ACL...". Squid takes the first line for a name: "deny all" first
// removes the field from every request (request_header_remove), "allow
// all" first keeps it (the default). A line for only some requests, for
// All or Other, or for a field peerd writes itself is listed.
func (s *squidImport) requestHeaderAccess(n int, w []string) {
	if len(w) < 3 {
		s.note(n, "%s: want a field name, allow or deny, and ACLs", strings.Join(w, " "))
		return
	}
	name := w[1]
	key := strings.ToLower(name)
	if s.headerRuleSeen[key] {
		return // Squid never reaches it for this field
	}
	if s.headerRuleSeen == nil {
		s.headerRuleSeen = map[string]bool{}
	}
	s.headerRuleSeen[key] = true
	all := len(w) == 4 && w[3] == "all"
	switch {
	case key == "all" || key == "other":
		s.note(n, "%s: peerd removes fields it is given by name only", strings.Join(w, " "))
	case all && w[2] == "allow":
	case !all || w[2] != "deny":
		s.note(n, "%s: peerd removes a field from every request or none", strings.Join(w, " "))
	default:
		if err := proxyCheck(func(c *forwarding.Config) { c.RequestHeaderRemove = []string{name} }); err != nil {
			s.note(n, "%s: %v", strings.Join(w, " "), err)
			return
		}
		s.removeFields = append(s.removeFields, name)
	}
}

// quickAbort reads quick_abort_min (a size, or -1: always finish),
// quick_abort_max (a size) and quick_abort_pct (a percentage) into the
// [cache] keys of the same names.
func (s *squidImport) quickAbort(w []string) error {
	if len(w) < 2 {
		return fmt.Errorf("%s: missing a value", w[0])
	}
	if s.cacheKeys == nil {
		s.cacheKeys = map[string]string{}
	}
	if w[0] == "quick_abort_pct" {
		pct, err := strconv.Atoi(w[1])
		if err != nil || pct < 0 || pct > 100 {
			return fmt.Errorf("quick_abort_pct %q is not a percentage", w[1])
		}
		s.cacheKeys[w[0]] = strconv.Itoa(pct)
		return nil
	}
	if v, err := strconv.ParseInt(w[1], 10, 64); err == nil && v < 0 && w[0] == "quick_abort_min" {
		s.cacheKeys[w[0]] = tomlString("-1") // whatever its unit: always finish
		return nil
	}
	size, err := squidSize(w[1:])
	if err != nil {
		return fmt.Errorf("%s: %v", w[0], err)
	}
	s.cacheKeys[w[0]] = tomlString(size)
	return nil
}

// renderCacheKeys writes the [cache] keys quickAbort read.
func (s *squidImport) renderCacheKeys(b *strings.Builder) {
	for _, k := range []string{"quick_abort_min", "quick_abort_max", "quick_abort_pct"} {
		if v, ok := s.cacheKeys[k]; ok {
			fmt.Fprintf(b, "%s = %s\n", k, v)
		}
	}
}
