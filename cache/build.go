package cache

// This file holds how a response becomes an Object: whether it may be
// stored (RFC 9111 3), the fields kept, its freshness lifetime (4.2.1,
// 4.2.2, heuristics) and the indexes of its validators and Vary.

import (
	"time"
	"unsafe"

	"github.com/peerd/peerd/internal/h1"
)

// build makes the object for a response to r from its head, with the
// cache's heuristic settings; it reports false when the response may not
// be stored at all.
func (c *Cache) build(r *Request, resp *h1.Response, reqTime, respTime time.Time) (*Object, bool) {
	var cc Directives
	for _, f := range resp.Fields {
		if f.Kind == h1.CacheControl {
			parseCC(&cc, f.Value)
		}
	}
	if !c.storable(r, resp, &cc) {
		return nil, false
	}
	o := &Object{
		Status: resp.Status, requestTime: reqTime.UnixNano(), responseTime: respTime.UnixNano(),
		flags: cc.flags, swr: cc.StaleWhileRevalidate, sie: cc.StaleIfError,
	}
	if len(resp.Reason) > 0 {
		o.reason = append([]byte(nil), resp.Reason...)
	}
	o.fields = appendStoredFields(make([]byte, 0, fieldsSize(resp)), resp, &cc, respTime)
	o.index(r)
	o.setAge(resp)
	o.lifetime = c.lifetime(o, &cc, unsafe.String(unsafe.SliceData(r.Key), len(r.Key))) // not kept
	if o.vary != nil && varyStar(o.vary) {
		return nil, false
	}
	if resp.Status == 206 {
		first, last, total, ok := contentRange(o.field(h1.ContentRange))
		if !ok {
			return nil, false
		}
		o.partial, o.first, o.total = true, first, total
		if resp.ContentLength >= 0 && resp.ContentLength != last-first+1 {
			return nil, false
		}
	}
	o.recordVary(r)
	// A response that could never be used again is not worth the memory:
	// no freshness, no validator, and no explicit word on its freshness
	// that would let it answer when the next hops are dead.
	explicit := cc.flags&(ccMaxAge|ccSMaxAge|ccFreshnessInvalid) != 0 || o.field(h1.Expires) != nil
	if o.lifetime <= 0 && !o.HasValidator() && !explicit {
		return nil, false
	}
	return o, true
}

// heuristicStatus lists the statuses cacheable by default (RFC 9110
// 15.1), the ones heuristic freshness may apply to.
func heuristicStatus(s int) bool {
	switch s {
	case 200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501:
		return true
	}
	return false
}

// storable applies RFC 9111 3 for a shared cache.
func (c *Cache) storable(r *Request, resp *h1.Response, cc *Directives) bool {
	if r.Method != "GET" || r.CC.NoStore() {
		return false
	}
	if resp.Status < 200 || resp.Status == 304 || resp.Status > 599 {
		return false
	}
	if resp.Status == 401 || resp.Status == 407 {
		// A challenge is never stored, whatever its freshness (Squid
		// stores neither): served later, it would answer a request that
		// carries the very credentials it asks for.
		return false
	}
	if cc.has(ccNoStore) || cc.has(ccPrivate) {
		return false
	}
	if r.Authorization && !cc.has(ccPublic|ccMustRevalidate|ccSMaxAge) {
		return false
	}
	if resp.Status == 206 && (r.Range == nil || resp.Get("Content-Range") == nil) {
		return false
	}
	// Something must say the response may be reused: explicit freshness,
	// public, or a status cacheable by default.
	if cc.has(ccPublic|ccMaxAge|ccSMaxAge|ccFreshnessInvalid) || resp.Get("Expires") != nil {
		return true
	}
	// A response that sets a cookie and says nothing of its freshness is
	// a page made for one client (a login, a session): it is not kept on
	// a guess (Varnish does not cache it either).
	if hasSetCookie(resp) {
		return false
	}
	return heuristicStatus(resp.Status)
}

func hasSetCookie(resp *h1.Response) bool {
	for _, f := range resp.Fields {
		if f.Kind == h1.SetCookie || f.Kind == h1.SetCookie2 {
			return true
		}
	}
	return false
}

// lifetime is the freshness lifetime in seconds (RFC 9111 4.2.1, 4.2.2).
func (c *Cache) lifetime(o *Object, cc *Directives, key string) int64 {
	switch {
	case cc.has(ccFreshnessInvalid):
		return 0
	case cc.has(ccSMaxAge):
		return cc.SMaxAge
	case cc.has(ccMaxAge):
		return cc.MaxAge
	}
	if e := o.field(h1.Expires); e != nil {
		exp, ok := parseHTTPDate(e)
		if !ok {
			return 0 // an invalid Expires is in the past
		}
		return max(0, exp-o.dateValue)
	}
	st := c.cfg()
	pct, minLife, maxLife := st.heuristicPercent, int64(0), int64(st.heuristicMax/time.Second)
	for i := range st.refresh {
		if p := &st.refresh[i]; p.re.MatchString(key) {
			pct, minLife, maxLife = p.percent, p.min, p.max
			break
		}
	}
	if !heuristicStatus(o.Status) && !cc.has(ccPublic) {
		return 0
	}
	if o.lastModRaw == nil {
		return minLife // Squid: fresh for min without Last-Modified
	}
	since := o.dateValue - o.lastModified
	if since <= 0 || pct <= 0 {
		return minLife
	}
	return min(max(since*int64(pct)/100, minLife), maxLife)
}

// fieldsSize guesses the stored fields' size to allocate once.
func fieldsSize(resp *h1.Response) int {
	n := 64
	for _, f := range resp.Fields {
		n += len(f.Name) + len(f.Value) + 4
	}
	return n
}

// storedField reports whether a response field is stored (RFC 9111
// 3.1): hop-by-hop fields, those the Connection field names, framing,
// Age (the cache computes its own), the proxy-authentication fields meant
// for this hop, and fields a qualified no-cache or private names are not.
func storedField(f h1.Field, resp *h1.Response, cc *Directives) bool {
	if f.HopByHop(resp.ConnTokens) {
		return false
	}
	switch f.Kind {
	case h1.ContentLength, h1.Age, h1.Trailer, h1.ProxyAuthenticate, h1.ProxyAuthenticationInfo, h1.ProxyAuthorization:
		return false
	case h1.SetCookie, h1.SetCookie2:
		// One client's cookie is never replayed to another: stored as if
		// no-cache="Set-Cookie" were always present (Squid strips it from
		// every hit too).
		return false
	}
	for _, n := range cc.NoCacheFields {
		if equalFold(f.Name, string(n)) {
			return false
		}
	}
	for _, n := range cc.PrivateFields {
		if equalFold(f.Name, string(n)) {
			return false
		}
	}
	return true
}

func appendStoredFields(b []byte, resp *h1.Response, cc *Directives, respTime time.Time) []byte {
	hasDate := false
	for _, f := range resp.Fields {
		if !storedField(f, resp, cc) {
			continue
		}
		if f.Kind == h1.Date {
			hasDate = true
		}
		b = appendLine(b, f.Name, f.Value)
	}
	if !hasDate {
		// A cache records when a response without a Date arrived and adds
		// it (RFC 9110 6.6.1).
		b = append(b, "Date: "...)
		b = appendHTTPDate(b, respTime)
		b = append(b, "\r\n"...)
	}
	return b
}

func appendLine(b, name, value []byte) []byte {
	b = append(b, name...)
	b = append(b, ": "...)
	b = append(b, value...)
	return append(b, "\r\n"...)
}

// index finds the validators, dates and selecting fields in the stored
// fields and computes the secondary key for r.
func (o *Object) index(r *Request) {
	o.etag, o.lastModRaw, o.vary, o.contentLang, o.contentType = nil, nil, nil, nil, nil
	o.dateValue = o.responseTime / int64(time.Second)
	dateSeen := false
	eachLine(o.fields, func(name, value []byte) {
		switch kind(name) {
		case h1.ETag:
			if o.etag == nil {
				o.etag = value
			}
		case h1.LastModified:
			if o.lastModRaw == nil {
				if t, ok := parseHTTPDate(value); ok {
					o.lastModRaw, o.lastModified = value, t
				}
			}
		case h1.Date:
			if !dateSeen {
				dateSeen = true
				if t, ok := parseHTTPDate(value); ok {
					o.dateValue = t
				}
			}
		case h1.Vary:
			o.vary = appendFieldList(o.vary, value)
		case h1.ContentLanguage:
			if o.contentLang == nil {
				o.contentLang = value
			}
		case h1.ContentType:
			if o.contentType == nil {
				o.contentType = value
			}
		}
	})
}

// setAge records the Age the response arrived with (first valid value).
func (o *Object) setAge(resp *h1.Response) {
	for _, f := range resp.Fields {
		if f.Kind == h1.Age {
			if n, ok := deltaSeconds(f.Value); ok {
				o.ageValue = n
			}
			return
		}
	}
}

// field returns the first stored value of a field kind.
func (o *Object) field(k h1.Kind) []byte {
	var v []byte
	eachLine(o.fields, func(name, value []byte) {
		if v == nil && kind(name) == k {
			v = value
		}
	})
	return v
}

// eachLine calls fn for every stored field line.
func eachLine(b []byte, fn func(name, value []byte)) {
	for len(b) > 0 {
		end := 0
		for end+1 < len(b) && !(b[end] == '\r' && b[end+1] == '\n') {
			end++
		}
		line := b[:end]
		b = b[min(end+2, len(b)):]
		colon := 0
		for colon < len(line) && line[colon] != ':' {
			colon++
		}
		if colon == len(line) {
			continue
		}
		fn(line[:colon], h1.TrimOWS(line[colon+1:]))
	}
}

// kind classifies a stored field name like h1 does.
func kind(name []byte) h1.Kind { return h1.KindOf(name) }
