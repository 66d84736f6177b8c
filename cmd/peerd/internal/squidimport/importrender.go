package squidimport

// This file holds the writing of import-squid's TOML: the sections, the
// [[peer]] tables, the [[rule]] and [[route]] tables translated from the
// access controls, and the notes on what was not carried over.

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/peerd/peerd/internal/conf"
)

// summary is one line on what the import wrote: the parents and their
// policy (with squid.conf's own word for it when that differs), the
// access rules and routes, and how many lines are listed as not carried
// over.
func (s *squidImport) summary() string {
	parents, siblings := 0, 0
	for _, p := range s.peers {
		if p.typ == "parent" {
			parents++
		} else {
			siblings++
		}
	}
	policy := fmt.Sprintf("policy %s", s.policyName)
	if s.fileSays != "" && s.fileSays != s.policyName {
		policy += fmt.Sprintf(" for squid.conf's %s", s.fileSays)
	}
	lossy := ""
	if len(s.lossy) > 0 {
		lossy = fmt.Sprintf(" (%d http_access line(s) widened or dropped: -lossy)", len(s.lossy))
	}
	return fmt.Sprintf("%d parent(s), %d sibling(s), %s; %d access rule(s), %d route(s); %d note(s) on what is not carried over%s",
		parents, siblings, policy, len(s.rules), len(s.routes), len(s.notes), lossy)
}

func (s *squidImport) render() string {
	var b strings.Builder
	b.WriteString("# peerd config imported from a squid.conf by `peerd import-squid`.\n")
	var icpAllow []string // first: its notes go with the others
	if s.icpListen != "" {
		if icpAllow = s.icpSources().cidrs(); len(icpAllow) == 0 {
			s.note(0, "icp_port: icp_access answers no source (Squid's default without icp_access lines), so peerd does not answer ICP")
			s.icpListen = ""
		}
	}
	policy := s.policy()
	s.policyName = policy
	firstParent := ""
	if ps := s.parentNames(); len(ps) > 0 {
		firstParent = ps[0]
	}
	if len(s.says) > 0 {
		b.WriteString("#\n# Carried over, but not word for word:\n")
		for _, n := range s.says {
			fmt.Fprintf(&b, "#   %s\n", conf.Printable(n))
		}
	}
	if len(s.notes) > 0 {
		b.WriteString("#\n# Not carried over:\n")
		for _, n := range s.notes {
			fmt.Fprintf(&b, "#   %s\n", conf.Printable(n))
		}
	}
	b.WriteString("\n[proxy]\n")
	if s.listen != "" {
		fmt.Fprintf(&b, "listen = %s\n", tomlString(s.listen))
	}
	if s.name != "" {
		fmt.Fprintf(&b, "name = %s\n", tomlString(s.name))
	}
	if s.connectTimeout > 0 {
		fmt.Fprintf(&b, "connect_timeout = %s\n", tomlString(s.connectTimeout.String()))
	}
	if s.maxTries > 0 {
		fmt.Fprintf(&b, "forward_max_tries = %d\n", s.maxTries)
	}
	if s.pconnTimeout > 0 {
		fmt.Fprintf(&b, "pconn_timeout = %s\n", tomlString(s.pconnTimeout.String()))
	}
	s.renderProxyKeys(&b)
	if s.tlsListen != "" {
		fmt.Fprintf(&b, "tls_listen = %s\ntls_cert = %s\ntls_key = %s\n", tomlString(s.tlsListen), tomlString(s.tlsCert), tomlString(s.tlsKey))
	}
	direct := s.direct
	if direct == "" {
		direct = "allow"
	}
	fmt.Fprintf(&b, "direct = %q\n", direct)
	// http_access (or its absence: deny all) decides who is served.
	b.WriteString("# http_access decides who is served: [[rule]] below\nallow = [\"0.0.0.0/0\", \"::/0\"]\n")
	if len(s.denyTo) > 0 || s.safePorts != nil || s.connectPorts != nil {
		b.WriteString("\n[access]\n")
		if s.safePorts != nil {
			writeList(&b, "safe_ports", s.safePorts)
		}
		if s.connectPorts != nil {
			writeList(&b, "connect_ports", s.connectPorts)
		}
		if len(s.denyTo) > 0 {
			writeList(&b, "deny_to", s.denyTo)
		}
	}
	// Squid's cachemgr has no password here to carry over: the admin API
	// needs a token of its own before reload, drain or purge work. A
	// commented table, so that an [admin] added below is no duplicate.
	b.WriteString("\n# [admin]\n# token_file = \"/etc/peerd/admin.token\"  # a token of 128 bits or more (openssl rand -base64 24), mode 0600\n")
	fmt.Fprintf(&b, "\n[selection]\npolicy = %q\n", policy)
	if s.accessLogPath != "" || s.keepQuery {
		b.WriteString("\n[log]\n")
		if s.accessLogPath != "" {
			fmt.Fprintf(&b, "access_log = %s  # access_log %s: Squid's own, not written here\n", tomlString(peerdAccessLog), conf.Printable(s.accessLogPath))
			if s.accessLogFormat != "" {
				fmt.Fprintf(&b, "access_log_format = %s  # logformat\n", tomlString(s.accessLogFormat))
			}
		}
		if s.keepQuery {
			b.WriteString("strip_query_terms = false  # strip_query_terms off\n")
		}
	}
	if s.icpListen != "" || s.icpTimeout > 0 || s.icpNoLog || s.deadPeerTimeout > 0 {
		b.WriteString("\n[icp]\n")
		if s.deadPeerTimeout > 0 {
			fmt.Fprintf(&b, "dead_peer_timeout = %s  # dead_peer_timeout\n", tomlString(s.deadPeerTimeout.String()))
		}
		if s.icpNoLog {
			b.WriteString("log_queries = false  # log_icp_queries off\n")
		}
		if s.icpListen != "" {
			fmt.Fprintf(&b, "listen = %s\n", tomlString(s.icpListen))
			writeList(&b, "allow", icpAllow)
		}
		if s.icpTimeout > 0 {
			fmt.Fprintf(&b, "query_timeout = %s\n", tomlString(s.icpTimeout.String()))
		}
	}
	if s.cacheMem != "" || s.maxObject != "" || s.maxInMemory != "" || s.diskDir != "" || s.heuristicSet || len(s.refresh) > 0 || s.collapse != "" || s.cacheOff || len(s.cacheKeys) > 0 {
		b.WriteString("\n[cache]\n")
		s.renderCacheKeys(&b)
		if s.cacheOff {
			b.WriteString("memory = \"0\"  # cache deny all: nothing is stored\n")
		}
		if s.collapse != "" {
			fmt.Fprintf(&b, "collapse = %s  # collapsed_forwarding\n", s.collapse)
		}
		if len(s.refresh) > 0 {
			b.WriteString("refresh_patterns = [  # refresh_pattern, in order\n")
			for _, p := range s.refresh {
				ims := ""
				if p.RefreshIMS {
					ims = ", refresh_ims = true"
				}
				fmt.Fprintf(&b, "  { pattern = %s, min = %s, percent = %d, max = %s%s },\n", tomlString(p.Pattern), tomlString(p.Min.String()), p.Percent, tomlString(p.Max.String()), ims)
			}
			b.WriteString("]\n")
		}
		if s.heuristicSet {
			fmt.Fprintf(&b, "heuristic_percent = %d\nheuristic_max = %s\n", s.heuristicPercent, tomlString(s.heuristicMax.String()))
		}
		if s.cacheMem != "" {
			fmt.Fprintf(&b, "memory = %s\n", tomlString(s.cacheMem))
		}
		if s.maxObject != "" {
			fmt.Fprintf(&b, "max_object = %s\n", tomlString(s.maxObject))
		}
		if s.diskDir != "" {
			fmt.Fprintf(&b, "disk = %s  # cache_dir %s: Squid's own spool, not used here\ndisk_size = %s\n", tomlString(peerdDisk), conf.Printable(s.diskDir), tomlString(s.diskSize))
		}
		if s.maxInMemory != "" {
			fmt.Fprintf(&b, "max_object_in_memory = %s\n", tomlString(s.maxInMemory))
		}
	}
	if s.basicUsers != "" {
		fmt.Fprintf(&b, "\n[auth]\nbasic_users = %s\n", tomlString(s.basicUsers))
		if s.realm != "" {
			fmt.Fprintf(&b, "realm = %s\n", tomlString(s.realm))
		}
	}
	for _, p := range s.peers {
		fmt.Fprintf(&b, "\n[[peer]]  # %s\nname = %s\nhost = %s\nport = %d\ntype = %q\n", s.squidWhere(p.line), tomlString(p.name), tomlString(p.host), p.port, p.typ)
		if p.weight != 1 {
			fmt.Fprintf(&b, "weight = %d\n", p.weight)
		}
		if p.failLimit > 0 {
			fmt.Fprintf(&b, "connect_fail_limit = %d\n", p.failLimit)
		}
		timeout := p.connectTimeout
		if timeout == 0 {
			timeout = s.peerTimeout
		}
		if timeout > 0 {
			fmt.Fprintf(&b, "connect_timeout = %s\n", tomlString(timeout.String()))
		}
		if p.maxConn > 0 {
			fmt.Fprintf(&b, "max_conn = %d\n", p.maxConn)
		}
		if p.isDefault && !(policy == "first-up" && p.name == firstParent) {
			b.WriteString("default = true\n")
		} else if p.isDefault {
			b.WriteString("# squid.conf says default, but Squid's first-up tries the first parent listed first: so does this\n")
		}
		if p.login != "" {
			fmt.Fprintf(&b, "login = %s\n", tomlString(p.login))
		}
		if p.icpPort != 0 {
			fmt.Fprintf(&b, "icp_port = %d\n", p.icpPort)
		}
		if p.proxyOnly {
			b.WriteString("proxy_only = true\n")
		}
		if p.tls {
			b.WriteString("tls = true\n")
			for _, kv := range [][2]string{{"tls_ca", p.tlsCA}, {"tls_name", p.tlsName}, {"tls_cert", p.tlsCert}, {"tls_key", p.tlsKey}} {
				if kv[1] != "" {
					fmt.Fprintf(&b, "%s = %s\n", kv[0], tomlString(kv[1]))
				}
			}
		}
	}
	for _, r := range s.routes {
		s.writeRule(&b, "route", r)
	}
	for _, r := range s.rules {
		s.writeRule(&b, "rule", r)
	}
	return b.String()
}

// squidWhere is where(n) for a TOML comment: "squid.conf line 12" in
// the file given, or the included file's name and line.
func (s *squidImport) squidWhere(n int) string {
	w := s.where(n)
	if strings.HasPrefix(w, "line ") {
		return "squid.conf " + w
	}
	return w
}

// writeRule writes one [[rule]] or [[route]] table.
func (s *squidImport) writeRule(b *strings.Builder, table string, r importRule) {
	fmt.Fprintf(b, "\n[[%s]]", table)
	if r.line > 0 {
		fmt.Fprintf(b, "  # %s", s.squidWhere(r.line))
	}
	if r.why != "" {
		fmt.Fprintf(b, "  # %s", r.why)
	}
	b.WriteString("\n")
	if r.action != "" {
		fmt.Fprintf(b, "action = %q\n", r.action)
	}
	// Every key is written (a key left out would widen the table).
	for _, key := range slices.Sorted(maps.Keys(r.keys)) {
		if vals := r.keys[key]; intKeys[key] && len(vals) == 1 {
			fmt.Fprintf(b, "%s = %s\n", key, vals[0])
			continue
		}
		writeList(b, key, r.keys[key])
	}
	if r.routed {
		writeList(b, "peers", r.peers)
	}
	if r.direct != "" {
		fmt.Fprintf(b, "direct = %q\n", r.direct)
	}
}

func writeList(b *strings.Builder, key string, vals []string) {
	fmt.Fprintf(b, "%s = [", key)
	for i, v := range vals {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(tomlString(v))
	}
	b.WriteString("]\n")
}

// tomlString writes s as a TOML basic string: invalid UTF-8 becomes
// U+FFFD, control characters \uXXXX escapes (Go's %q would write \x
// escapes, which TOML does not have).
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// secretWords match what a squid.conf line carries that is a secret: a
// cache_peer login's password, cachemgr_passwd, an SNMP community, and
// any password= or pass= option. The notes (printed on stderr and as
// comments) name the line without them.
var secretWords = []*regexp.Regexp{
	regexp.MustCompile(`(\blogin=[^:\s]*:)\S+`),
	regexp.MustCompile(`(\bcachemgr_passwd\s+)\S+`),
	regexp.MustCompile(`(\bsnmp_community\s+)\S+`),
	regexp.MustCompile(`(?i)(\b(?:password|passwd|pass)=)\S+`),
}

// redactSecrets replaces the secrets in a note with "***".
func redactSecrets(note string) string {
	for _, re := range secretWords {
		note = re.ReplaceAllString(note, "${1}***")
	}
	return note
}
