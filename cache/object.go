package cache

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peerd/peerd/internal/h1"
)

// Object is one stored response. Once stored it is immutable: a refresh
// (a 304) stores a new Object with the merged head and the same body, so
// that a hit reads it without a lock while the store moves on.
type Object struct {
	// Store bookkeeping.
	Key       string
	secondary string // the Vary selecting values of the request it answered
	Size      int64
	prev      *Object
	next      *Object
	protected bool
	linked    bool          // in the store's lists (under the shard lock)
	hits      atomic.Uint32 // samples recency refreshes of hot objects

	// Status is the stored response's status code.
	Status int
	reason []byte
	// fields are the stored header field lines ("Name: value\r\n"): the
	// response's end-to-end fields less framing, Age and the fields the
	// response said not to store; a Date when it came without one.
	fields []byte
	// Body is the response body (for a partial object, the bytes from
	// first to first+len(Body) of a representation total long).
	Body    []byte
	partial bool
	first   int64
	total   int64

	// Freshness (RFC 9111 4.2), in Unix nanoseconds and seconds.
	requestTime  int64
	responseTime int64
	dateValue    int64 // seconds
	ageValue     int64 // seconds
	lifetime     int64 // seconds
	flags        uint32
	swr, sie     int64 // stale-while-revalidate, stale-if-error seconds

	// Validators and selecting fields, slices of fields.
	etag         []byte
	lastModRaw   []byte
	lastModified int64 // seconds; valid when lastModRaw != nil
	vary         [][]byte
	varyValues   [][]byte // r's normalized values of vary; nil: r had none
	contentLang  []byte
	contentType  []byte

	// stream is how the body arrives while the response is relayed; nil
	// for an object built complete. A stored object is always complete.
	stream *stream
	// length is the body's whole length when stream is set: known from
	// the start (Content-Length) or at the end (Finish), while Body grows.
	length int64
}

// stream is the body of an object still arriving, shared with the
// collapsed requests that are served from it as it streams.
type stream struct {
	mu     sync.Mutex
	cond   sync.Cond
	n      int64 // bytes of Body written
	done   bool
	failed bool
}

// Fresh and stale arithmetic.

// currentAge is the object's age at now in nanoseconds (RFC 9111 4.2.3).
func (o *Object) currentAge(now int64) int64 {
	apparent := max(0, o.responseTime-o.dateValue*int64(time.Second))
	corrected := o.ageValue*int64(time.Second) + (o.responseTime - o.requestTime)
	return max(apparent, corrected) + max(0, now-o.responseTime)
}

// Age is the object's current age, as the Age field says it.
func (o *Object) Age(now time.Time) int64 {
	return min(o.currentAge(now.UnixNano())/int64(time.Second), maxDelta)
}

// TTL is how many seconds of freshness are left at now (negative once
// stale), for Cache-Status.
func (o *Object) TTL(now time.Time) int64 {
	left := o.lifetime*int64(time.Second) - o.currentAge(now.UnixNano())
	if left < 0 {
		return -((-left + int64(time.Second) - 1) / int64(time.Second))
	}
	return left / int64(time.Second)
}

// fresh reports whether the object is fresh at now for a request with
// the directives of r (RFC 9111 4.2 and 5.2.1).
func (o *Object) freshFor(r *Request, now int64) bool {
	if o.flags&ccNoCache != 0 {
		return false
	}
	age := o.currentAge(now)
	life := o.lifetime * int64(time.Second)
	if r != nil {
		if r.noCache {
			return false
		}
		if r.CC.has(ccMaxAge) && age > r.CC.MaxAge*int64(time.Second) {
			return false
		}
		if r.CC.has(ccMinFresh) && life-age < r.CC.MinFresh*int64(time.Second) {
			return false
		}
	}
	if life > age {
		return true
	}
	// Stale: max-stale may accept it, unless the response forbids serving
	// it stale to a shared cache's clients.
	if r != nil && r.CC.has(ccMaxStale) && !o.mustRevalidate() {
		return r.CC.has(ccMaxStaleAny) || age-life <= r.CC.MaxStale*int64(time.Second)
	}
	return false
}

// mustRevalidate: the object may never be served stale (RFC 9111
// 5.2.2.2, 5.2.2.8, 5.2.2.10: a shared cache honours proxy-revalidate
// and s-maxage the same way).
func (o *Object) mustRevalidate() bool {
	return o.flags&(ccMustRevalidate|ccProxyRevalidate|ccSMaxAge) != 0
}

// MayServeStale reports whether the object may stand in for an answer the
// next hops could not give, up to limit past its freshness: never when
// it must be revalidated or needs validation on every use.
func (o *Object) MayServeStale(now time.Time, limit time.Duration) bool {
	if limit <= 0 || o.mustRevalidate() || o.flags&ccNoCache != 0 {
		return false
	}
	over := o.currentAge(now.UnixNano()) - o.lifetime*int64(time.Second)
	return over <= int64(limit)
}

// StaleIfError reports whether stale-if-error (RFC 5861 4), in the
// response or the request, lets the object answer for an error now.
func (o *Object) StaleIfError(r *Request, now time.Time) bool {
	if o.mustRevalidate() || o.flags&ccNoCache != 0 {
		return false
	}
	window := int64(-1)
	if o.flags&ccSIE != 0 {
		window = o.sie
	}
	if r != nil && r.CC.has(ccSIE) {
		window = max(window, r.CC.StaleIfError)
	}
	if window < 0 {
		return false
	}
	over := o.currentAge(now.UnixNano()) - o.lifetime*int64(time.Second)
	return over <= window*int64(time.Second)
}

// StaleWhileRevalidate reports whether stale-while-revalidate (RFC 5861
// 3) lets the object answer r at once while it is revalidated in the
// background.
func (o *Object) StaleWhileRevalidate(r *Request, now time.Time) bool {
	if o.flags&ccSWR == 0 || o.ForbidsStale() || r.noCache {
		return false
	}
	over := o.currentAge(now.UnixNano()) - o.lifetime*int64(time.Second)
	return over <= o.swr*int64(time.Second)
}

// Validators.

// HasValidator reports whether a conditional request can revalidate it.
func (o *Object) HasValidator() bool { return o.etag != nil || o.lastModRaw != nil }

// AppendConditionals appends the conditional fields that revalidate the
// object (RFC 9111 4.3.1).
func (o *Object) AppendConditionals(b []byte) []byte {
	if o.etag != nil {
		b = append(b, "If-None-Match: "...)
		b = append(b, o.etag...)
		b = append(b, "\r\n"...)
	}
	if o.lastModRaw != nil {
		b = append(b, "If-Modified-Since: "...)
		b = append(b, o.lastModRaw...)
		b = append(b, "\r\n"...)
	}
	return b
}

// NotModified evaluates the request's own preconditions against the
// object (RFC 9111 4.3.2, RFC 9110 13.2.2): true means answer 304.
func (o *Object) NotModified(r *Request) bool {
	if o.Status != 200 || o.partial {
		return false
	}
	if r.IfNoneMatch != nil {
		return o.etag != nil && etagListMatches(r.IfNoneMatch, o.etag)
	}
	if r.IfModifiedSince != nil {
		ims, ok := parseHTTPDate(r.IfModifiedSince)
		if !ok {
			return false
		}
		switch {
		case o.lastModRaw != nil:
			return o.lastModified <= ims
		default:
			return o.dateValue <= ims
		}
	}
	return false
}

// etagListMatches is the weak comparison of If-None-Match (RFC 9110
// 13.1.2): "*" or any listed tag equal to tag once W/ is set aside.
func etagListMatches(list, tag []byte) bool {
	want := opaque(tag)
	for len(list) > 0 {
		list = h1.TrimOWS(list)
		if len(list) > 0 && list[0] == ',' {
			list = list[1:]
			continue
		}
		if len(list) > 0 && list[0] == '*' {
			return true
		}
		end := 0
		if len(list) >= 2 && list[0] == 'W' && list[1] == '/' {
			end = 2
		}
		if end < len(list) && list[end] == '"' {
			end++
			for end < len(list) && list[end] != '"' {
				end++
			}
			end = min(end+1, len(list))
		} else {
			for end < len(list) && list[end] != ',' {
				end++
			}
		}
		if string(opaque(list[:end])) == string(want) {
			return true
		}
		list = list[end:]
	}
	return false
}

// opaque strips the weakness indicator of an entity tag.
func opaque(tag []byte) []byte {
	if len(tag) >= 2 && tag[0] == 'W' && tag[1] == '/' {
		return tag[2:]
	}
	return tag
}

// Building objects.

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
	o.lifetime = c.lifetime(o, &cc)
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
func (c *Cache) lifetime(o *Object, cc *Directives) int64 {
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
	if o.lastModRaw != nil && (heuristicStatus(o.Status) || cc.has(ccPublic)) && st.heuristicPercent > 0 {
		since := o.dateValue - o.lastModified
		if since <= 0 {
			return 0
		}
		return min(since*int64(st.heuristicPercent)/100, int64(st.heuristicMax/time.Second))
	}
	return 0
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

// Serving.

// AppendStatusLine appends the status line for status (the stored one,
// or 304/206/416 made from it).
func (o *Object) AppendStatusLine(b []byte, status int) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	switch {
	case status == o.Status && o.reason != nil:
		b = append(b, o.reason...)
	default:
		b = append(b, statusText(status)...)
	}
	return append(b, "\r\n"...)
}

// AppendFields appends the stored fields (all of them).
func (o *Object) AppendFields(b []byte) []byte { return append(b, o.fields...) }

// AppendNotModifiedFields appends the stored fields a 304 carries (RFC
// 9110 15.4.5).
func (o *Object) AppendNotModifiedFields(b []byte) []byte {
	eachLine(o.fields, func(name, value []byte) {
		switch kind(name) {
		case h1.CacheControl, h1.ContentLocation, h1.Date, h1.ETag, h1.Expires, h1.Vary:
			b = appendLine(b, name, value)
		}
	})
	return b
}

// AppendFieldsExcept appends the stored fields but one kind (the stored
// Content-Range of a partial object, replaced by the range served).
func (o *Object) AppendFieldsExcept(b []byte, k h1.Kind) []byte {
	eachLine(o.fields, func(name, value []byte) {
		if kind(name) != k {
			b = appendLine(b, name, value)
		}
	})
	return b
}

// Partial reports whether the object is a stored 206 (a part of its
// representation) and which part.
func (o *Object) Partial() (first, total int64, ok bool) { return o.first, o.total, o.partial }

// Stream returns the bytes of the body from off that have arrived,
// waiting for more while the response is still being relayed; done
// reports the end of the body and failed a body that broke off.
func (o *Object) Stream(off int64) (p []byte, done, failed bool) {
	s := o.stream
	if s == nil {
		return o.Body[min(off, int64(len(o.Body))):], true, false
	}
	s.mu.Lock()
	for s.n <= off && !s.done && !s.failed {
		s.cond.Wait()
	}
	n, done, failed, body := s.n, s.done, s.failed, o.Body
	s.mu.Unlock()
	if off >= n {
		return nil, done, failed
	}
	return body[off:n], done, failed
}

// ContentType is the stored Content-Type (for the access log).
func (o *Object) ContentType() []byte { return o.contentType }

// ForbidsStale reports a response that must never be served stale
// (must-revalidate, proxy-revalidate, s-maxage) or unvalidated (no-cache).
func (o *Object) ForbidsStale() bool { return o.mustRevalidate() || o.flags&ccNoCache != 0 }

// Length is the body's length.
func (o *Object) Length() int64 {
	if o.stream != nil {
		return o.length
	}
	return int64(len(o.Body))
}

func statusText(s int) string {
	if t := http.StatusText(s); t != "" {
		return t
	}
	return "Status " + strconv.Itoa(s)
}
