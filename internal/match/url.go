package match

// This file holds the URL as rules see it: the request's URI rebuilt the
// way Squid rebuilds it before url_regex and urlpath_regex look at it, so
// that a spelling a client chooses ("HTTP://Example.COM:80/%73ecret")
// cannot pass a rule the plain spelling meets.

import (
	"strconv"
	"strings"
)

// CanonicalURL is the URI as Squid's url_regex sees it, and the path (with
// its query) as urlpath_regex sees it:
//
//   - the scheme and the host lower-cased, the scheme's default port
//     dropped (and a port written with leading zeros read as its number);
//   - an empty path written "/";
//   - every %XX escape decoded as rfc1738_unescape decodes it ("%00" and
//     escapes that are not two hex digits are kept as written).
//
// A target in authority form ("host:port", CONNECT) is lower-cased and
// has no path. raw is a request target peerd accepted, with its host
// already in its canonical spelling (access.CanonicalHost).
func CanonicalURL(raw string) (uri, path string) {
	i := strings.Index(raw, "://")
	if i <= 0 {
		return strings.ToLower(raw), ""
	}
	scheme := strings.ToLower(raw[:i])
	rest := raw[i+3:]
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	authority, pq := rest[:end], rest[end:]
	host, port := splitPort(authority)
	var b strings.Builder
	b.Grow(len(raw) + 1)
	b.WriteString(scheme)
	b.WriteString("://")
	b.WriteString(strings.ToLower(host))
	if port != "" {
		if n, err := strconv.Atoi(port); err == nil && n >= 0 {
			if n != defaultPort(scheme) {
				b.WriteByte(':')
				b.WriteString(strconv.Itoa(n))
			}
		} else {
			b.WriteByte(':')
			b.WriteString(port)
		}
	}
	at := b.Len()
	if !strings.HasPrefix(pq, "/") {
		b.WriteByte('/')
	}
	unescape(&b, pq)
	uri = b.String()
	return uri, uri[at:]
}

// splitPort splits "host:port" ("[v6]:port" too); port is "" when there
// is none (a trailing ":" included).
func splitPort(a string) (host, port string) {
	colon := strings.LastIndexByte(a, ':')
	if colon < 0 || strings.LastIndexByte(a, ']') > colon {
		return a, ""
	}
	return a[:colon], a[colon+1:]
}

// defaultPort is the port a scheme implies (-1: none known).
func defaultPort(scheme string) int {
	switch scheme {
	case "http":
		return 80
	case "https":
		return 443
	case "ftp":
		return 21
	}
	return -1
}

// unescape writes s with its %XX escapes decoded, as Squid's
// rfc1738_unescape: "%%" is one "%", an escape that is not two hex digits
// stays as written, and "%00" is kept (a NUL would end Squid's string).
func unescape(b *strings.Builder, s string) {
	for j := 0; j < len(s); j++ {
		c := s[j]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if j+1 < len(s) && s[j+1] == '%' {
			b.WriteByte('%')
			j++
			continue
		}
		if j+2 < len(s) {
			hi, lo := fromHex(s[j+1]), fromHex(s[j+2])
			if hi >= 0 && lo >= 0 && hi|lo != 0 {
				b.WriteByte(byte(hi<<4 | lo))
				j += 2
				continue
			}
		}
		b.WriteByte('%')
	}
}

func fromHex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
