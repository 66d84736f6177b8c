package cache

// This file holds a request as the cache sees it: its key, directives,
// conditionals and the Vary selecting values.

import (
	"bytes"
	"slices"

	"github.com/peerd/peerd/internal/h1"
)

// Request is what the cache reads of a request. It is reused from request
// to request (Reset) and allocates nothing once its buffers have grown.
type Request struct {
	Method string
	// Key is the primary cache key, built with AppendKey.
	Key    []byte
	Fields []h1.Field
	CC     Directives
	// Authorization: the request carries credentials, so its response is
	// shared only when the response says so (RFC 9111 3.5).
	Authorization bool
	// The request's own preconditions and range.
	IfNoneMatch, IfModifiedSince, IfRange, Range []byte
	// Conditional: any precondition at all (If-Match and
	// If-Unmodified-Since included), so the request is not one to collapse.
	Conditional bool

	noCache bool // no-cache, or Pragma: no-cache without Cache-Control
	scratch []byte
	lower   []byte
	parts   [][]byte
}

// Reset reads a request's method and fields; Key is left to the caller.
func (r *Request) Reset(method string, fields []h1.Field) {
	*r = Request{Method: method, Key: r.Key[:0], Fields: fields, scratch: r.scratch[:0], lower: r.lower[:0], parts: r.parts[:0]}
	hasCC, pragmaNoCache := false, false
	for _, f := range fields {
		switch f.Kind {
		case h1.CacheControl:
			hasCC = true
			parseCC(&r.CC, f.Value)
		case h1.Pragma:
			if containsFold(f.Value, "no-cache") {
				pragmaNoCache = true
			}
		case h1.Authorization:
			r.Authorization = true
		case h1.IfNoneMatch:
			if r.IfNoneMatch == nil {
				r.IfNoneMatch = f.Value
			}
			r.Conditional = true
		case h1.IfModifiedSince:
			if r.IfModifiedSince == nil {
				r.IfModifiedSince = f.Value
			}
			r.Conditional = true
		case h1.IfRange:
			r.IfRange = f.Value
			r.Conditional = true
		case h1.IfMatch, h1.IfUnmodifiedSince:
			r.Conditional = true
		case h1.Range:
			r.Range = f.Value
		}
	}
	// Pragma counts only where Cache-Control is absent (RFC 9111 5.4).
	r.noCache = r.CC.has(ccNoCache) || (!hasCC && pragmaNoCache)
}

// NoCache reports that the request asks for validation of any stored
// response.
func (r *Request) NoCache() bool { return r.noCache }

// AppendKey appends the primary cache key of a URL: scheme and host in
// lower case, the port only when it is not the scheme's default, and the
// path and query as sent ("/" when empty).
func AppendKey(b, scheme, host, port, pathQuery []byte) []byte {
	start := len(b)
	b = append(b, scheme...)
	lowerASCII(b[start:])
	b = append(b, "://"...)
	h := len(b)
	bracket := bytes.IndexByte(host, ':') >= 0
	if bracket {
		b = append(b, '[')
	}
	b = append(b, host...)
	if bracket {
		b = append(b, ']')
	}
	lowerASCII(b[h:])
	if len(port) > 0 && !defaultPort(b[start:h-3], port) {
		b = append(append(b, ':'), port...)
	}
	if len(pathQuery) == 0 || pathQuery[0] != '/' {
		b = append(b, '/')
	}
	return append(b, pathQuery...)
}

func defaultPort(scheme, port []byte) bool {
	return (string(scheme) == "http" && string(port) == "80") || (string(scheme) == "https" && string(port) == "443")
}

func lowerASCII(b []byte) {
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
}

// Vary (RFC 9111 4.1).

// varyStar reports a Vary of "*": the response matches no later request.
func varyStar(names [][]byte) bool {
	for _, n := range names {
		if len(n) == 1 && n[0] == '*' {
			return true
		}
	}
	return false
}

// varyValue is the request's normalized value of a selecting field, in
// r.scratch (valid until the next call), and whether the request has the
// field at all. Field lines are combined, list elements trimmed and
// joined by ","; Accept-Language and Accept-Encoding, whose element order
// and case carry no meaning for a match, are lower-cased and sorted too.
func (r *Request) varyValue(name []byte) ([]byte, bool) {
	r.scratch = r.scratch[:0]
	r.lower = r.lower[:0]
	r.parts = r.parts[:0]
	sorted := equalFold(name, "accept-language") || equalFold(name, "accept-encoding")
	present := false
	for _, f := range r.Fields {
		if !equalFold(f.Name, string(name)) {
			continue
		}
		present = true
		v := f.Value
		for len(v) > 0 {
			j := bytes.IndexByte(v, ',')
			if j < 0 {
				j = len(v)
			}
			if e := h1.TrimOWS(v[:j]); len(e) > 0 {
				if sorted {
					s := len(r.lower)
					for _, c := range e {
						if c != ' ' && c != '\t' {
							r.lower = append(r.lower, c)
						}
					}
					lowerASCII(r.lower[s:])
					// Offsets for now: r.lower may move while it grows.
					r.parts = append(r.parts, r.lower[s:len(r.lower):len(r.lower)])
				} else {
					if len(r.scratch) > 0 {
						r.scratch = append(r.scratch, ',')
					}
					r.scratch = append(r.scratch, e...)
				}
			}
			if j == len(v) {
				break
			}
			v = v[j+1:]
		}
	}
	if sorted {
		// Re-slice the parts: r.lower may have been reallocated.
		off := 0
		for i, p := range r.parts {
			r.parts[i] = r.lower[off : off+len(p)]
			off += len(p)
		}
		slices.SortFunc(r.parts, bytes.Compare)
		for i, p := range r.parts {
			if i > 0 {
				r.scratch = append(r.scratch, ',')
			}
			r.scratch = append(r.scratch, p...)
		}
	}
	return r.scratch, present
}

// preferredLanguage is the request's Accept-Language range with the
// highest q (the first of equals), or nil.
func (r *Request) preferredLanguage() []byte {
	var best []byte
	bestQ := -1
	for _, f := range r.Fields {
		if f.Kind != h1.Other || !equalFold(f.Name, "accept-language") {
			continue
		}
		v := f.Value
		for len(v) > 0 {
			j := bytes.IndexByte(v, ',')
			if j < 0 {
				j = len(v)
			}
			e := h1.TrimOWS(v[:j])
			tag, q := e, 1000
			if k := bytes.IndexByte(e, ';'); k >= 0 {
				tag = h1.TrimOWS(e[:k])
				q = qvalue(h1.TrimOWS(e[k+1:]))
			}
			if len(tag) > 0 && q > bestQ && q > 0 {
				best, bestQ = tag, q
			}
			if j == len(v) {
				break
			}
			v = v[j+1:]
		}
	}
	return best
}

// qvalue parses "q=0.5" into thousandths (1000 when malformed: a weight
// that cannot be read does not demote).
func qvalue(p []byte) int {
	if len(p) < 3 || (p[0] != 'q' && p[0] != 'Q') || p[1] != '=' {
		return 1000
	}
	v := p[2:]
	n, scale, dot := 0, 1000, false
	for _, c := range v {
		switch {
		case c == '.' && !dot:
			dot = true
		case c >= '0' && c <= '9':
			if !dot {
				n = n*10 + int(c-'0')
			} else if scale > 1 {
				scale /= 10
				n = n*10 + int(c-'0')
			}
		default:
			return 1000
		}
	}
	for scale > 1 && dot {
		n *= 10
		scale /= 10
	}
	if !dot {
		n *= 1000
	}
	return min(n, 1000)
}

// matches reports whether o answers r's selecting fields (its Vary).
func (o *Object) matches(r *Request) bool {
	for i, name := range o.vary {
		v, present := r.varyValue(name)
		stored := o.varyValues[i]
		if present == (stored != nil) && string(v) == string(stored) {
			continue
		}
		// An Accept-Language that lists the languages in another order or
		// weight still selects the stored response when the language the
		// client prefers is the one the response is in.
		if o.contentLang != nil && equalFold(name, "accept-language") {
			if p := r.preferredLanguage(); p != nil && equalFold(p, string(h1.TrimOWS(firstElement(o.contentLang)))) {
				continue
			}
		}
		return false
	}
	return true
}

func firstElement(v []byte) []byte {
	if i := bytes.IndexByte(v, ','); i >= 0 {
		return v[:i]
	}
	return v
}

// recordVary copies r's selecting values for o's Vary and builds the
// secondary key that tells o's variants apart.
func (o *Object) recordVary(r *Request) {
	o.varyValues = make([][]byte, len(o.vary))
	var key []byte
	for i, name := range o.vary {
		v, present := r.varyValue(name)
		key = append(append(key, name...), ':')
		if present {
			o.varyValues[i] = append([]byte{}, v...)
			key = append(append(key, '='), v...)
		}
		key = append(key, '\n')
	}
	if o.partial {
		key = append(key, "\x00partial"...)
	}
	o.secondary = string(key)
}

// containsFold reports whether b contains s, ASCII case-insensitively.
func containsFold(b []byte, s string) bool {
	for i := 0; i+len(s) <= len(b); i++ {
		if equalFold(b[i:i+len(s)], s) {
			return true
		}
	}
	return false
}
