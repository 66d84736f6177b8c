package squidimport

// This file holds import-squid's reading of access_log (the one log peerd
// writes, to a file), logformat, log_icp_queries and strip_query_terms.

import (
	"strings"

	"github.com/peerd/peerd/forwarding"
)

// squidLogFormats are the formats Squid has built in besides its native
// one: common and combined peerd writes too; the others it has no
// equivalent for.
var squidLogFormats = map[string]bool{"common": true, "combined": true, "referrer": true, "useragent": true}

// logDirective reads access_log, logformat, log_icp_queries and
// strip_query_terms lines.
func (s *squidImport) logDirective(n int, w []string) {
	switch {
	case w[0] == "access_log":
		s.accessLog(n, w[1:])
		return
	case w[0] == "log_icp_queries":
		s.icpNoLog = len(w) > 1 && w[1] == "off" // [icp] log_queries
		return
	case w[0] == "strip_query_terms":
		s.keepQuery = len(w) > 1 && w[1] == "off" // [log] strip_query_terms
		return
	}
	// logformat NAME SPEC: a format of the file's own, known by name to
	// access_log (which says whether peerd can write it).
	if len(w) < 3 {
		s.note(n, "%s: a logformat needs a name and a format", strings.Join(w, " "))
		return
	}
	if s.logFormats == nil {
		s.logFormats = map[string]string{}
	}
	s.logFormats[w[1]] = strings.Join(w[2:], " ")
}

// accessLog reads "access_log none", or "access_log [MODULE:]PATH
// [FORMAT | logformat=FORMAT] [OPTIONS] [ACL ...]", into [log]
// access_log. peerd writes one file, in Squid's native format, for every
// request; so only a log of that format to a file (module stdio or
// daemon, or a bare path) with no ACL is carried over, to peerd's own
// file (peerdAccessLog), never Squid's. A log of some
// requests only is not widened to all of them (it may leave out what must
// not be logged), and syslog or network logs have no equivalent: those
// are noted.
func (s *squidImport) accessLog(n int, w []string) {
	line := "access_log " + strings.Join(w, " ")
	if len(w) == 0 {
		s.note(n, "%s: no place to log to", line)
		return
	}
	place, rest := w[0], w[1:]
	if place == "none" {
		switch {
		case len(rest) == 0:
		case s.accessLogPath != "":
			// It stops only the access_log lines after it.
			s.note(n, "%s: the log taken from an earlier line logs every request, as Squid did", line)
		default:
			s.note(n, "%s: peerd cannot leave some requests out of its log", line)
			if s.logExcluded == 0 {
				s.logExcluded = n
			}
		}
		return
	}
	if module, path, ok := strings.Cut(place, ":"); ok && !strings.HasPrefix(place, "/") {
		if module != "stdio" && module != "daemon" {
			s.note(n, "%s: peerd logs to a file only (module %s)", line, module)
			return
		}
		place = path
	}
	format := "squid"
	var acls []string
	for i, word := range rest {
		switch {
		case strings.HasPrefix(word, "logformat="):
			format = strings.TrimPrefix(word, "logformat=")
		case i == 0 && !strings.Contains(word, "=") && (word == "squid" || squidLogFormats[word] || s.logFormats[word] != ""):
			format = word
		case strings.Contains(word, "="):
			// buffer-size=, rotate=, on-error=: how Squid writes, not what.
		default:
			acls = append(acls, word)
		}
	}
	spec := ""
	switch {
	case format == "squid":
	case format == "common" || format == "combined":
		spec = format
	case s.logFormats[format] != "":
		spec = s.logFormats[format]
		if _, err := forwarding.CompileLogFormat(spec); err != nil {
			s.note(n, "%s: logformat %s: %v", line, format, err)
			return
		}
	default:
		s.note(n, "%s: peerd has no %s format (it writes squid, common, combined, or a logformat of the codes it knows)", line, format)
		return
	}
	switch {
	case len(acls) > 0:
		s.note(n, "%s: peerd cannot log only the requests %s matches", line, strings.Join(acls, " "))
	case s.logExcluded > 0:
		s.note(n, "%s: the access_log none on %s leaves some requests out, and peerd would log them all", line, s.where(s.logExcluded))
	case !strings.HasPrefix(place, "/"):
		s.note(n, "%s: not a file path", line)
	case s.accessLogPath != "":
		s.note(n, "%s: peerd writes one access log, %s", line, s.accessLogPath)
	default:
		s.accessLogPath, s.accessLogFormat = place, spec
		s.say("%s: %s: Squid's log %s stays Squid's: peerd writes its own, %s (the systemd unit's LogsDirectory)", s.where(n), line, place, peerdAccessLog)
	}
}
