package cache

// This file holds byte ranges (RFC 9110 14) answered from a stored
// response, whole or partial.

import (
	"bytes"

	"github.com/peerd/peerd/internal/h1"
)

// Ranges (RFC 9110 14): a single byte range is answered from a stored
// response, whole or partial; several ranges, or one peerd cannot read,
// get the whole response (a server may ignore Range).

// byteRange parses a single "bytes=" range against a representation of
// length n: the first and last byte positions, or unsatisfiable, or not
// ok (no range, several, or malformed: answer the whole).
func byteRange(v []byte, n int64) (first, last int64, ok, unsatisfiable bool) {
	v = h1.TrimOWS(v)
	if len(v) < 7 || !equalFold(v[:6], "bytes=") {
		return 0, 0, false, false
	}
	spec := h1.TrimOWS(v[6:])
	if bytes.IndexByte(spec, ',') >= 0 {
		return 0, 0, false, false
	}
	dash := bytes.IndexByte(spec, '-')
	if dash < 0 {
		return 0, 0, false, false
	}
	a, b := spec[:dash], spec[dash+1:]
	switch {
	case len(a) == 0:
		// A suffix: the last b bytes.
		k, okk := deltaSeconds(b)
		if !okk {
			return 0, 0, false, false
		}
		if k == 0 || n == 0 {
			return 0, 0, false, true
		}
		return max(0, n-k), n - 1, true, false
	default:
		f, okf := deltaSeconds(a)
		if !okf {
			return 0, 0, false, false
		}
		l := n - 1
		if len(b) > 0 {
			var okl bool
			if l, okl = deltaSeconds(b); !okl || l < f {
				return 0, 0, false, false
			}
		}
		if f >= n {
			return 0, 0, false, true
		}
		return f, min(l, n-1), true, false
	}
}

// contentRange parses "bytes first-last/total" (total may be "*": then
// it is last+1 as far as the cache is concerned).
func contentRange(v []byte) (first, last, total int64, ok bool) {
	v = h1.TrimOWS(v)
	if len(v) < 9 || !equalFold(v[:6], "bytes ") {
		return 0, 0, 0, false
	}
	v = v[6:]
	dash := bytes.IndexByte(v, '-')
	slash := bytes.IndexByte(v, '/')
	if dash <= 0 || slash < dash {
		return 0, 0, 0, false
	}
	f, ok1 := deltaSeconds(v[:dash])
	l, ok2 := deltaSeconds(v[dash+1 : slash])
	if !ok1 || !ok2 || l < f {
		return 0, 0, 0, false
	}
	t := l + 1
	if string(v[slash+1:]) != "*" {
		var ok3 bool
		if t, ok3 = deltaSeconds(v[slash+1:]); !ok3 || t <= l {
			return 0, 0, 0, false
		}
	}
	return f, l, t, true
}

// covers reports whether a stored part holds the whole range r asks for.
func (o *Object) covers(r *Request) bool {
	f, l, ok, _ := byteRange(r.Range, o.total)
	return ok && f >= o.first && l < o.first+o.bodyLen()
}

// RangeFor decides how r's Range is answered from o: ok with the byte
// positions (relative to the representation) for a 206, unsatisfiable
// for a 416, neither for the whole response. If-Range that does not
// match (a strong entity tag, or exactly the Last-Modified) means the
// whole response.
func (o *Object) RangeFor(r *Request) (first, last, total int64, ok, unsatisfiable bool) {
	if r.Range == nil || r.Method != "GET" || (o.Status != 200 && !o.partial) {
		return 0, 0, 0, false, false
	}
	if r.IfRange != nil && !o.ifRangeMatches(r.IfRange) {
		if o.partial {
			return 0, 0, 0, false, true
		}
		return 0, 0, 0, false, false
	}
	total = o.bodyLen()
	if o.partial {
		total = o.total
	}
	first, last, ok, unsatisfiable = byteRange(r.Range, total)
	if o.partial && ok && (first < o.first || last >= o.first+o.bodyLen()) {
		return 0, 0, 0, false, true
	}
	return first, last, total, ok, unsatisfiable && !o.partial
}

// ifRangeMatches: an If-Range entity tag must match strongly, a date must
// be the Last-Modified exactly (RFC 9110 13.1.5).
func (o *Object) ifRangeMatches(v []byte) bool {
	v = h1.TrimOWS(v)
	if len(v) > 0 && (v[0] == '"' || (len(v) > 1 && v[0] == 'W' && v[1] == '/')) {
		return o.etag != nil && v[0] == '"' && o.etag[0] == '"' && string(v) == string(o.etag)
	}
	t, ok := parseHTTPDate(v)
	return ok && o.lastModRaw != nil && t == o.lastModified
}

// Slice returns the stored body bytes of representation positions first
// to last.
func (o *Object) Slice(first, last int64) []byte {
	off := int64(0)
	if o.partial {
		off = o.first
	}
	return o.Body[first-off : last-off+1]
}
