package cache

// This file holds Cache-Control (RFC 9111 5.2): directives parsed in place,
// without allocating.

import "github.com/peerd/peerd/internal/h1"

// Cache-Control (RFC 9111 5.2), parsed in place: a Directives value points
// into the field values it was parsed from and allocates nothing.

// Directive flags.
const (
	ccNoStore uint32 = 1 << iota
	ccNoCache        // unqualified: the whole response needs validation
	ccPrivate        // unqualified
	ccPublic
	ccMustRevalidate
	ccProxyRevalidate
	ccMustUnderstand
	ccImmutable
	ccOnlyIfCached
	ccNoTransform
	ccMaxAge
	ccSMaxAge
	ccMaxStale    // with or without a value
	ccMaxStaleAny // max-stale without a value: any staleness
	ccMinFresh
	ccSWR
	ccSIE
	ccFreshnessInvalid // a max-age or s-maxage that is not a delta-seconds
)

// Directives are the Cache-Control directives of one message. Valued
// directives keep their first occurrence (RFC 9111 4.2.1); one whose value
// is malformed makes the response stale rather than fresh for longer
// ("caches are encouraged to consider responses that have invalid
// freshness information to be stale").
type Directives struct {
	flags uint32
	// Seconds, valid when the matching flag is set.
	MaxAge, SMaxAge, MaxStale, MinFresh, StaleWhileRevalidate, StaleIfError int64
	// NoCacheFields and PrivateFields are the field names of the qualified
	// forms (no-cache="Set-Cookie"), as sent: a shared cache drops them
	// from what it stores and may reuse the rest.
	NoCacheFields, PrivateFields [][]byte
}

func (d *Directives) has(f uint32) bool { return d.flags&f != 0 }

// NoStore reports no-store.
func (d *Directives) NoStore() bool { return d.has(ccNoStore) }

// NoCache reports unqualified no-cache.
func (d *Directives) NoCache() bool { return d.has(ccNoCache) }

// OnlyIfCached reports only-if-cached.
func (d *Directives) OnlyIfCached() bool { return d.has(ccOnlyIfCached) }

// maxDelta is where delta-seconds saturate (RFC 9111 1.2.2).
const maxDelta = 1 << 31

// parseCC adds the directives of one Cache-Control field value to d.
func parseCC(d *Directives, v []byte) {
	i := 0
	for i < len(v) {
		// Skip separators and whitespace before an element.
		for i < len(v) && (v[i] == ',' || v[i] == ' ' || v[i] == '\t') {
			i++
		}
		if i == len(v) {
			return
		}
		start := i
		for i < len(v) && h1.IsTchar(v[i]) {
			i++
		}
		name := v[start:i]
		var val []byte
		hasVal, quoted, ok := false, false, len(name) > 0
		if ok && i < len(v) && v[i] == '=' {
			i++
			hasVal = true
			if i < len(v) && v[i] == '"' {
				val, i, ok = quotedString(v, i)
				quoted = true
			} else {
				s := i
				for i < len(v) && h1.IsTchar(v[i]) {
					i++
				}
				val = v[s:i]
				ok = len(val) > 0
			}
		}
		for ok && i < len(v) && (v[i] == ' ' || v[i] == '\t') {
			i++
		}
		if !ok || (i < len(v) && v[i] != ',') {
			// A malformed element: skip to the next comma outside a
			// quoted string; if it looked like a freshness directive it
			// makes the response stale.
			if len(name) > 0 && (equalFold(name, "max-age") || equalFold(name, "s-maxage")) {
				d.flags |= ccFreshnessInvalid
			}
			i = skipElement(v, i)
			continue
		}
		d.apply(name, val, hasVal, quoted)
	}
}

// qualified records no-cache or private: with a quoted field list, the
// fields (the rest of the response may be reused); otherwise, or when the
// list names no field, the unqualified flag.
func (d *Directives) qualified(fields *[][]byte, flag uint32, val []byte, quoted bool) {
	if quoted {
		*fields = appendFieldList(*fields, val)
		if len(*fields) > 0 {
			return
		}
	}
	d.flags |= flag
}

// apply records one well-formed directive.
func (d *Directives) apply(name, val []byte, hasVal, quoted bool) {
	seconds := func(flag uint32, dst *int64) {
		if d.has(flag) {
			return // the first occurrence counts
		}
		n, ok := deltaSeconds(val)
		if !hasVal || !ok {
			if flag == ccMaxAge || flag == ccSMaxAge {
				d.flags |= ccFreshnessInvalid
			}
			return
		}
		d.flags |= flag
		*dst = n
	}
	switch {
	case equalFold(name, "max-age"):
		seconds(ccMaxAge, &d.MaxAge)
	case equalFold(name, "s-maxage"):
		seconds(ccSMaxAge, &d.SMaxAge)
	case equalFold(name, "no-store"):
		d.flags |= ccNoStore
	case equalFold(name, "no-cache"):
		d.qualified(&d.NoCacheFields, ccNoCache, val, hasVal && quoted)
	case equalFold(name, "private"):
		d.qualified(&d.PrivateFields, ccPrivate, val, hasVal && quoted)
	case equalFold(name, "public"):
		d.flags |= ccPublic
	case equalFold(name, "must-revalidate"):
		d.flags |= ccMustRevalidate
	case equalFold(name, "proxy-revalidate"):
		d.flags |= ccProxyRevalidate
	case equalFold(name, "must-understand"):
		d.flags |= ccMustUnderstand
	case equalFold(name, "immutable"):
		d.flags |= ccImmutable
	case equalFold(name, "no-transform"):
		d.flags |= ccNoTransform
	case equalFold(name, "only-if-cached"):
		d.flags |= ccOnlyIfCached
	case equalFold(name, "max-stale"):
		if d.has(ccMaxStale) {
			return
		}
		if !hasVal {
			d.flags |= ccMaxStale | ccMaxStaleAny
			return
		}
		if n, ok := deltaSeconds(val); ok {
			d.flags |= ccMaxStale
			d.MaxStale = n
		}
	case equalFold(name, "min-fresh"):
		seconds(ccMinFresh, &d.MinFresh)
	case equalFold(name, "stale-while-revalidate"):
		seconds(ccSWR, &d.StaleWhileRevalidate)
	case equalFold(name, "stale-if-error"):
		seconds(ccSIE, &d.StaleIfError)
	}
}

// deltaSeconds parses 1*DIGIT, saturating at 2^31 (leading zeros are
// fine, anything else is not).
func deltaSeconds(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if n < maxDelta {
			n = n*10 + int64(c-'0')
		}
	}
	return min(n, maxDelta), true
}

// quotedString reads a quoted-string starting at v[i] == '"' and returns
// its content (escapes left in: directive values that matter are digits
// and field names), the index after it, and whether it was closed.
func quotedString(v []byte, i int) ([]byte, int, bool) {
	i++
	start := i
	for i < len(v) {
		switch v[i] {
		case '\\':
			i += 2
			continue
		case '"':
			return v[start:i], i + 1, true
		}
		i++
	}
	return nil, len(v), false
}

// skipElement moves past the rest of a list element, honouring quoted
// strings, and returns the index of the comma that ends it (or the end).
func skipElement(v []byte, i int) int {
	for i < len(v) && v[i] != ',' {
		if v[i] == '"' {
			_, i, _ = quotedString(v, i)
			continue
		}
		i++
	}
	return i
}

// appendFieldList appends the comma-separated field names of a qualified
// no-cache or private value.
func appendFieldList(dst [][]byte, v []byte) [][]byte {
	for len(v) > 0 {
		j := 0
		for j < len(v) && v[j] != ',' {
			j++
		}
		if f := h1.TrimOWS(v[:j]); len(f) > 0 {
			dst = append(dst, f)
		}
		if j == len(v) {
			break
		}
		v = v[j+1:]
	}
	return dst
}

// equalFold compares ASCII case-insensitively.
func equalFold(b []byte, s string) bool { return h1.EqualFold(b, s) }
