package cache

// This file holds the stored response (Object): freshness and staleness
// arithmetic, validators, and what a hit writes.

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
	hot       bool   // a hot copy of a fleet owner's answer (AdmitHot)
	secondary string // the Vary selecting values of the request it answered
	Size      int64
	fifo      fifoLinks     // in the store's small FIFO (policy.go)
	pol       pol           // its place in the store's policy
	diskHits  atomic.Uint32 // samples the disk tier's recency refreshes
	hash      atomic.Uint64 // the memory store's hash of Key (store.go); 0 until first stored

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

	// disk is where the body is when it is on disk only (a disk-only
	// object's head in memory); nil when Body holds it.
	disk *diskRef
	// loadedFrom is the disk id of an object promoted from disk to memory
	// (or refreshed from one that had a disk copy).
	loadedFrom uint64
	// committed is the disk id of this object's own disk copy, once its
	// write committed (an object stored in memory and on disk at once).
	committed atomic.Uint64

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
	n      int64 // bytes of Body written (or, from disk, of the file's body)
	done   bool
	failed bool
	// disk: the body is not in memory but in the file this writer is
	// writing (a disk-only object); n counts what it has written.
	disk *diskWriter
}

// streaming reports whether o's body is still arriving (nil: no).
func (o *Object) streaming() bool {
	if o == nil || o.stream == nil {
		return false
	}
	s := o.stream
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.done && !s.failed
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

// Selects reports whether a 304 identifies o for update (RFC 9111
// 4.3.4): its entity tag, when it has one, is o's (the weak comparison,
// as the conditional that drew it); without one, its Last-Modified, when
// it has one, is o's. A 304 with neither selects o, as every cache takes
// it. A 304 naming another representation selects nothing: merged, its
// validator would sit over another version's body.
func (o *Object) Selects(resp *h1.Response) bool {
	if tag := resp.Get("ETag"); tag != nil {
		return o.etag != nil && string(opaque(h1.TrimOWS(tag))) == string(opaque(o.etag))
	}
	if lm := resp.Get("Last-Modified"); lm != nil && o.lastModRaw != nil {
		t, ok := parseHTTPDate(h1.TrimOWS(lm))
		return ok && t == o.lastModified
	}
	return true
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

// Stream returns the bytes of the body from off that have arrived (of an
// object whose body arrives in memory; see BodyStream for any object),
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
	return o.bodyLen()
}

func statusText(s int) string {
	if t := http.StatusText(s); t != "" {
		return t
	}
	return "Status " + strconv.Itoa(s)
}
