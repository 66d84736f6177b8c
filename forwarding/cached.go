package forwarding

// This file holds the cache layer's work (layer.go has its shape): the
// step before the forward, lookups,
// collapsing, serving stored responses, admission of a relayed response,
// stale answers and invalidation.

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/peerd/peerd/cache"
	"github.com/peerd/peerd/internal/h1"
)

// The cache in the data path. A GET or HEAD is looked up before it is
// planned: a fresh stored response answers it (0 allocations), a stale
// one is revalidated through the same plan as any request, and a miss is
// forwarded, collapsed with concurrent misses for its key when it can be,
// and stored while it is relayed. Unsafe requests that succeed invalidate
// their URL. When no next hop can be reached, a stale response stands in
// within stale_if_dead.

// Squid result codes of cache answers (the access log).
const (
	resultMemHit         = "TCP_MEM_HIT"
	resultHit            = "TCP_HIT" // the body was read from disk
	resultIMSHit         = "TCP_IMS_HIT"
	resultRefreshUnmod   = "TCP_REFRESH_UNMODIFIED"
	resultRefreshMod     = "TCP_REFRESH_MODIFIED"
	resultRefreshFailOld = "TCP_REFRESH_FAIL_OLD"
)

// Why a request went to the next hop (RFC 9211 fwd).
const (
	fwdNone    = ""
	fwdURIMiss = "uri-miss"
	fwdVary    = "vary-miss"
	fwdStale   = "stale"
	fwdRequest = "request"
	fwdMethod  = "method"
	fwdBypass  = "bypass"
)

// CodeNotCached answers only-if-cached when nothing fresh is stored.
const CodeNotCached = "not-cached"

func init() {
	explanations[CodeNotCached] = "the request asked for a stored response only (only-if-cached) and none is fresh"
}

// safeMethod: a method whose success leaves the stored responses valid
// (RFC 9110 9.2.1).
func safeMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// lookup looks the request up. done means the client was answered from
// the cache, or must be told with e that only-if-cached cannot be met;
// otherwise l records what was found and the request is forwarded.
func (l *cacheLayer) lookup() (*Error, bool) {
	rq := l.rq
	req := &rq.req
	ch := l.ch
	cq := &l.cq
	cq.Reset(rq.method, req.Fields)
	if rq.method != http.MethodGet && rq.method != http.MethodHead || !rq.body.done {
		l.fwd = fwdRequest // a body on a GET: not a request the cache answers
		if rq.method != http.MethodGet && rq.method != http.MethodHead {
			l.fwd = fwdMethod
		}
		if cq.CC.OnlyIfCached() {
			// only-if-cached is never forwarded, whatever else the
			// request carries (a body, an unsafe method): nothing stored
			// can answer it, so it gets 504 at once.
			return errorf(http.StatusGatewayTimeout, CodeNotCached, "", "%s %s cannot be answered from the cache (only-if-cached)", rq.method, req.Target), true
		}
		return nil, false
	}
	cq.Key = cache.AppendKey(cq.Key[:0], req.Scheme, req.Host, req.Port, req.PathQuery)
	l.keyed = true
	if cq.CC.NoStore() {
		l.fwd = fwdRequest
		return nil, false
	}
	o, v, onDisk := ch.Find(cq, rq.start)
	if o != nil && !l.openBody(o) {
		// Its file is gone (evicted, or replaced by a refreshed copy
		// whose head is in memory by now): look once more, else a miss.
		if o, v, onDisk = ch.Find(cq, rq.start); o != nil && !l.openBody(o) {
			o, v, onDisk = nil, cache.Miss, false
		}
	}
	result, hit := resultMemHit, cache.OutcomeHit
	if onDisk {
		result, hit = resultHit, cache.OutcomeDiskHit
	}
	if v == cache.Hit {
		ch.CountKey(cq.Key, hit, false)
		l.serveObject(o, result, nil)
		return nil, true
	}
	if cq.CC.OnlyIfCached() {
		// What a sibling asks of peerd: never forwarded.
		l.fwd = fwdURIMiss
		return errorf(http.StatusGatewayTimeout, CodeNotCached, "", "%s is not stored fresh here", req.Target), true
	}
	if v == cache.Stale && o.StaleWhileRevalidate(cq, rq.start) {
		ch.Count(hit, false)
		l.swr = true
		l.serveObject(o, result, nil)
		l.revalidateInBackground(ch)
		return nil, true
	}
	switch v {
	case cache.Stale:
		rq.stale, l.fwd = o, fwdStale
	case cache.VaryMiss:
		l.fwd = fwdVary
	default:
		l.fwd = fwdURIMiss
	}
	return l.collapse(ch)
}

// collapse joins the flight for the request's key. The leader goes to the
// next hop; a follower waits for the leader's response while watching its
// own client: a client that leaves releases everything at once, and when
// the leader fails the followers elect a new leader instead of all going
// to the next hop. done means the client was answered (or left).
func (l *cacheLayer) collapse(ch *cache.Cache) (*Error, bool) {
	rq := l.rq
	cq := &l.cq
	deadline := rq.start.Add(rq.gen.cfg.ReadTimeout)
	now := rq.start // the first join as of the request's arrival, a clock read saved
	for {
		f, leader := ch.Join(cq, now)
		if f == nil {
			return nil, false
		}
		if leader {
			l.flight = f
			return nil, false
		}
		w := l.side.watch(nil)
		obj, end := f.Wait(time.Until(deadline), w.left)
		if w.stop() || end == cache.Left {
			return nil, true // the client left (the writer heard it: watcher.stop)
		}
		switch {
		case end == cache.Shared && obj.Matches(cq) && l.openBody(obj):
			l.collapsed = true
			if obj.OnDisk() {
				ch.Count(cache.OutcomeDiskHit, true)
				l.serveObject(obj, resultHit, nil)
				return nil, true
			}
			ch.Count(cache.OutcomeHit, true)
			l.serveObject(obj, resultMemHit, nil)
			return nil, true
		case end == cache.Errored:
			// The leader's next hops failed it: the same failure, at
			// once, and nothing sent again (a stale copy may still
			// stand in).
			e := *f.Err().(*Error)
			if l.unanswered(&e) {
				return nil, true
			}
			return &e, true
		case end == cache.Failed:
			if now = time.Now(); now.Before(deadline) {
				continue // elect a new leader
			}
		}
		// The response could not be shared: this request goes on its own.
		return nil, false
	}
}

// failed shares the failure the client gets with the followers of the
// flight it leads, when the failure is its next hops' (they would fail
// the same way); any other (a bad request body, a refusal) lands the
// flight for a new leader when the layer is done.
func (l *cacheLayer) failed(e *Error) {
	if l.flight == nil || l.ch == nil {
		return
	}
	switch e.Code {
	case CodeConnectFailed, CodeBadGateway, CodeTimeout, CodeNoPeers:
		l.ch.LandFailure(l.flight, e)
		l.flight = nil
	}
}

// fields appends the Cache-Status of a response relayed from a next hop.
func (l *cacheLayer) fields(b []byte, status int) []byte {
	if l.fwd == fwdNone {
		return b
	}
	b = append(b, "Cache-Status: "...)
	b = append(b, l.rq.gen.cfg.Name...)
	b = append(b, "; fwd="...)
	b = append(b, l.fwd...)
	if l.fwd == fwdStale {
		b = append(b, "; fwd-status="...)
		b = strconv.AppendInt(b, int64(status), 10)
	}
	if l.cw.InMemory() {
		// Only what is certain once the body is whole: a disk-only copy
		// commits after this head is sent, and may still fail.
		b = append(b, "; stored"...)
	}
	return append(b, "\r\n"...)
}

// offer decides, when the response head arrived, what the cache does
// with it: invalidate after an unsafe request, refresh a validated
// object, or store while relaying. It returns true when the client was
// answered from the cache instead (a 304 to a revalidation, or a stale
// response standing in for a 5xx under stale-if-error).
func (l *cacheLayer) offer(a *attempt) (bool, outcome) {
	rq := l.rq
	ch := l.ch
	resp := &a.resp
	st := resp.Status
	if !safeMethod(rq.method) {
		if st >= 200 && st < 400 {
			l.invalidate(ch, resp)
		}
		return false, 0
	}
	if !l.keyed || l.fwd == fwdRequest || st < 200 || st == http.StatusSwitchingProtocols {
		return false, 0
	}
	now := a.headAt // the response time (RFC 9111 4.2.3): when its head arrived
	if now.IsZero() {
		now = time.Now()
	}
	cq := &l.cq
	if o := rq.stale; o != nil {
		switch {
		case st == http.StatusNotModified:
			fresh := ch.Refresh(o, cq, resp, rq.start, now)
			if fresh == nil {
				// The 304 is about another version than the stored
				// one, which is gone: ask again, unconditionally.
				a.release()
				rq.stale, l.refetch = nil, true
				return true, keepOpen
			}
			ch.Land(l.flight, fresh, false)
			l.flight = nil
			hop := a.hop
			a.release()
			ch.Count(cache.OutcomeRefresh, false)
			l.serveObject(fresh, resultRefreshUnmod, &hop)
			return true, l.after()
		case st >= 500 && o.StaleIfError(cq, now):
			a.release()
			l.serveStale(o)
			return true, l.after()
		}
	}
	if rq.method != http.MethodGet {
		return false, 0
	}
	length := int64(-1)
	if resp.BodyFor(false) == h1.LengthBody {
		length = resp.ContentLength
	}
	switch keep, hot := a.role.Keep(); {
	case !keep:
		// The hop keeps what it answers (proxy_only, or the key's owner
		// in the fleet): relayed, not stored, and the URL passes
		// uncollapsed for a while, as for an answer the cache could not
		// keep.
		ch.Land(l.flight, nil, true)
	case hot:
		// A hot copy of another's (hot_copies), within an eighth of the
		// memory.
		if l.cw = ch.AdmitHot(cq, resp, length, rq.start, now, l.flight); l.cw != nil {
			a.role.Kept()
		}
	default:
		l.cw = ch.Admit(cq, resp, length, rq.start, now, l.flight)
	}
	l.flight = nil // Admit lands it, now or when the body is whole
	if rq.stale != nil {
		ch.Count(cache.OutcomeRefresh, false)
		l.result = resultRefreshMod
	} else {
		ch.Count(cache.OutcomeMiss, false)
	}
	return false, 0
}

// unanswered is the step after a forward no next hop answered: a stale
// response within stale_if_dead answers instead; one that must not be
// served stale makes the answer 504 (RFC 9111 5.2.2.2). It reports
// whether the client was answered.
func (l *cacheLayer) unanswered(e *Error) bool {
	o := l.rq.stale
	if o == nil || l.ch == nil {
		return false
	}
	if e.Code != CodeNoPeers && e.Code != CodeConnectFailed {
		return false
	}
	l.ch.LandFailure(l.flight, e) // the followers' own stale copies stand in too
	l.flight = nil
	if o.MayServeStale(time.Now(), l.ch.StaleIfDead()) {
		l.serveStale(o)
		return true
	}
	if o.ForbidsStale() {
		e.Status = http.StatusGatewayTimeout
	}
	return false
}

// invalidate drops the stored responses of the request's URL, and of the
// Location and Content-Location of the response when they are on the same
// host (RFC 9111 4.4).
func (l *cacheLayer) invalidate(ch *cache.Cache, resp *h1.Response) {
	req := &l.rq.req
	key := cache.AppendKey(l.cq.Key[:0], req.Scheme, req.Host, req.Port, req.PathQuery)
	l.cq.Key = key
	ch.Invalidate(key)
	for _, f := range resp.Fields {
		if f.Kind != h1.Location && f.Kind != h1.ContentLocation {
			continue
		}
		if k := l.sameOriginKey(f.Value); k != nil {
			ch.Invalidate(k)
		}
	}
}

// sameOriginKey resolves a Location or Content-Location against the
// request URL and returns its cache key when it is on the same scheme,
// host and port; nil otherwise.
func (l *cacheLayer) sameOriginKey(ref []byte) []byte {
	req := &l.rq.req
	if len(ref) == 0 {
		return nil
	}
	origin := cache.AppendKey(nil, req.Scheme, req.Host, req.Port, nil)
	origin = origin[:len(origin)-1] // without the "/"
	switch {
	case bytes.HasPrefix(ref, []byte("//")):
		return nil
	case bytes.Contains(ref[:min(len(ref), 8)], []byte("://")):
		var r h1.Request
		if h1.ParseRequest(append(append([]byte("GET "), ref...), " HTTP/1.1\r\nHost: x\r\n\r\n"...), &r) != nil || r.Form != h1.AbsoluteForm {
			return nil
		}
		k := cache.AppendKey(nil, r.Scheme, r.Host, r.Port, r.PathQuery)
		if !bytes.HasPrefix(k, origin) || (len(k) > len(origin) && k[len(origin)] != '/') {
			return nil
		}
		return k
	case ref[0] == '/':
		return append(origin, ref...)
	default:
		// Relative to the request's path.
		path := req.PathQuery
		if i := bytes.IndexByte(path, '?'); i >= 0 {
			path = path[:i]
		}
		dir := path[:bytes.LastIndexByte(path, '/')+1]
		if len(dir) == 0 {
			dir = []byte("/")
		}
		return append(append(origin, dir...), ref...)
	}
}

// revalidateInBackground refreshes a stale response that was just served
// under stale-while-revalidate: a copy of the request, with no-cache,
// goes through the proxy itself on an in-memory connection, so it walks
// the plan, is collapsed and stored like any other, and its answer is
// discarded.
func (l *cacheLayer) revalidateInBackground(ch *cache.Cache) {
	rq := l.rq
	key := string(l.cq.Key)
	bg := rq.gen.bg
	if !bg.tasks.add() {
		return // shutting down: the stale answer stands, no refresh
	}
	if !ch.StartBackground(l.cq.Key) {
		bg.tasks.done()
		return
	}
	head := rq.head
	if n := len(head); n >= 4 && string(head[n-4:]) == "\r\n\r\n" {
		head = head[:n-2]
	}
	req := append(append([]byte{}, head...), "Cache-Control: no-cache\r\nConnection: close\r\n\r\n"...)
	from, readTimeout := *rq.from, rq.gen.cfg.ReadTimeout
	go func() {
		defer bg.tasks.done() // Shutdown waits for it
		defer ch.EndBackground(key)
		srv, cli := net.Pipe()
		done := make(chan struct{})
		go func() { bg.serve(srv, from); close(done) }()
		cli.SetDeadline(time.Now().Add(readTimeout)) // the generation of the request that started it
		cli.Write(req)
		io.Copy(io.Discard, cli)
		cli.Close()
		<-done
	}()
}

// serveInternal serves an in-memory connection as one from from.
func (p *Proxy) serveInternal(nc net.Conn, from client) {
	cc := newClientConn(p, nc)
	cc.from = from
	cc.serve()
}

// icpRequests are the scratch requests ICPHit looks up with (the ICP
// listener answers without allocating).
var icpRequests = sync.Pool{New: func() any { return new(cache.Request) }}

// ICPHit reports whether a fresh response to a GET of the absolute URL u
// is stored: an ICP query is answered HIT for it. A URL with stored
// variants (Vary) is a hit only for the variant a request without
// selecting fields would get.
func (p *Proxy) ICPHit(u []byte) bool {
	c := p.Cache()
	if c == nil {
		return false
	}
	scheme, host, port, pq, ok := h1.SplitAbsolute(u)
	if !ok {
		return false
	}
	r := icpRequests.Get().(*cache.Request)
	r.Reset(http.MethodGet, nil)
	r.Key = cache.AppendKey(r.Key[:0], scheme, host, port, pq)
	_, v := c.Lookup(r, time.Now())
	icpRequests.Put(r)
	return v == cache.Hit
}

// before is the step before the forward: the request is looked up in the
// generation's cache. done means the client was answered (or must be, with
// e: only-if-cached that cannot be met); otherwise the request is
// forwarded, with l as its sink.
func (l *cacheLayer) before() (e *Error, done bool) {
	l.ch = l.rq.gen.cache
	return l.lookup()
}
