package forwarding

import (
	"net/http"
	"strings"
)

// viaNames returns the received-by names of every Via entry.
func viaNames(h http.Header) []string {
	var out []string
	for _, v := range h.Values("Via") {
		for _, entry := range strings.Split(v, ",") {
			f := strings.Fields(strings.TrimSpace(entry))
			if len(f) >= 2 {
				out = append(out, f[1])
			}
		}
	}
	return out
}

// looped reports whether h's Via already names this proxy.
func looped(h http.Header, name string) bool {
	for _, n := range viaNames(h) {
		if strings.EqualFold(n, name) {
			return true
		}
	}
	return false
}

// appendVia adds our entry to the Via header, keeping earlier ones.
func appendVia(h http.Header, entry string) {
	prior := h.Values("Via")
	if len(prior) == 0 {
		h.Set("Via", entry)
		return
	}
	h.Set("Via", strings.Join(prior, ", ")+", "+entry)
}

// appendCacheControl adds a directive to Cache-Control.
func appendCacheControl(h http.Header, directive string) {
	prior := h.Values("Cache-Control")
	for _, v := range prior {
		if strings.Contains(strings.ToLower(v), directive) {
			return
		}
	}
	if len(prior) == 0 {
		h.Set("Cache-Control", directive)
		return
	}
	h.Set("Cache-Control", strings.Join(prior, ", ")+", "+directive)
}

// idempotent methods may be re-sent after they were written (RFC 9110 9.2.2).
func idempotent(method string) bool {
	switch method {
	case "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return true
	}
	return false
}
