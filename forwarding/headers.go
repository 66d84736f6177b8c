package forwarding

// This file holds loop detection on Via, the login sent to a parent, the
// one field writer the heads use (appendField), and small predicates on
// methods and statuses (idempotent, sibling miss).

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"strings"

	"github.com/peerd/peerd/internal/h1"
)

// looped reports whether the request's Via already names this proxy. A
// configured name is matched on the received-by alone, as Squid matches its
// unique_hostname. The default name is the host name, which every peerd on
// the host shares: an entry written by a peerd (its comment says so) is
// ours only when it carries our instance tag; any other entry with our name
// is taken for a loop, as before.
func looped(fields []h1.Field, c *runtimeConfig) bool {
	for _, f := range fields {
		if f.Kind != h1.Via {
			continue
		}
		for v := f.Value; len(v) > 0; {
			var entry []byte
			if i := bytes.IndexByte(v, ','); i >= 0 {
				entry, v = v[:i], v[i+1:]
			} else {
				entry, v = v, nil
			}
			by, comment := receivedBy(entry)
			if !h1.EqualFold(by, c.Name) {
				continue
			}
			if c.named || !bytes.Contains(comment, []byte("(peerd/")) || bytes.HasSuffix(bytes.TrimRight(comment, ") \t"), c.tag) {
				return true
			}
		}
	}
	return false
}

// receivedBy returns the second word of a Via entry, and what follows it.
func receivedBy(entry []byte) (by, rest []byte) {
	word := func(b []byte) ([]byte, []byte) {
		for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
			b = b[1:]
		}
		i := 0
		for i < len(b) && b[i] != ' ' && b[i] != '\t' {
			i++
		}
		return b[:i], b[i:]
	}
	_, rest = word(entry)
	return word(rest)
}

// loopError is the 508 for a request whose Via already names us, or nil.
func (c *runtimeConfig) loopError(fields []h1.Field) *Error {
	if !looped(fields, c) {
		return nil
	}
	var vias []string
	for _, f := range fields {
		if f.Kind == h1.Via {
			vias = append(vias, string(f.Value))
		}
	}
	return errorf(http.StatusLoopDetected, CodeLoopDetected, "", "Via already names %q: %s", c.Name, strings.Join(vias, ", "))
}

// hasDirective reports whether a field named name lists directive.
func hasDirective(fields []h1.Field, name, directive string) bool {
	for _, f := range fields {
		if f.Is(name) && strings.Contains(strings.ToLower(string(f.Value)), directive) {
			return true
		}
	}
	return false
}

// appendLogin appends a Proxy-Authorization field for a peer's
// "user:pass".
func appendLogin(b []byte, login string, req *h1.Request) []byte {
	if login == "PASS" {
		// Squid login=PASS: the client's own credentials go to this
		// peer (and only when the operator said so).
		if v := req.Get("Proxy-Authorization"); v != nil {
			b = appendField(b, []byte("Proxy-Authorization"), v)
		}
		return b
	}
	b = append(b, "Proxy-Authorization: Basic "...)
	b = base64.StdEncoding.AppendEncode(b, []byte(login))
	return append(b, "\r\n"...)
}

// idempotent methods may be re-sent after they were written (RFC 9110 9.2.2).
func idempotent(method string) bool {
	switch method {
	case "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return true
	}
	return false
}

// siblingMiss reports whether a sibling's answer means "not from me": the
// 504 of an only-if-cached miss, a refusal to serve us (401, 403, 407) or
// a failure of its own (5xx). A cached 404 is a hit and is passed on.
func siblingMiss(status int) bool {
	switch {
	case status == http.StatusUnauthorized, status == http.StatusForbidden, status == http.StatusProxyAuthRequired:
		return true
	}
	return status >= 500
}

func appendField(b, name, value []byte) []byte {
	b = append(b, name...)
	b = append(b, ": "...)
	b = append(b, value...)
	return append(b, "\r\n"...)
}
