package forwarding

// This file holds the answers the cache layer gives from a stored
// response: fresh, revalidated (304 refreshed), stale in place of a
// failure, and with ranges and the client's preconditions applied.

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/peerd/peerd/cache"
	"github.com/peerd/peerd/internal/h1"
	"github.com/peerd/peerd/selection"
)

// serveObject answers the client from a stored (or streaming) response:
// 304 when the client's preconditions hold, a range when it asked for one
// peerd can serve, the whole response otherwise. from is the hop whose 304
// refreshed it (nil: none).
func (l *cacheLayer) serveObject(o *cache.Object, result string, from *selection.Hop) {
	rq := l.rq
	w := l.w
	if !l.openBody(o) {
		// A disk-only body gone between the lookup and now (evicted
		// meanwhile): nothing was answered yet, and nothing can be.
		w.abandon()
		return
	}
	cq := &l.cq
	cfg := rq.gen.cfg
	now := rq.start // Age and ttl as of the request's arrival, a clock read saved
	status := o.Status
	var first, last, total int64
	ranged := false
	switch {
	case cq.Conditional && o.NotModified(cq):
		status = http.StatusNotModified
		if result == resultMemHit || result == resultHit {
			result = resultIMSHit
		}
	case cq.Range != nil:
		var ok, unsat bool
		first, last, total, ok, unsat = o.RangeFor(cq)
		switch {
		case ok:
			status, ranged = http.StatusPartialContent, true
		case unsat:
			status = http.StatusRequestedRangeNotSatisfiable
			total = o.Length()
		}
	}
	first0, total0, partial := o.Partial()
	if partial && !ranged {
		// A stored part answers only the range request it covers.
		status, ranged, first, last, total = http.StatusPartialContent, true, first0, first0+o.Length()-1, total0
	}
	b := o.AppendStatusLine(l.out[:0], status)
	switch {
	case status == http.StatusNotModified:
		b = o.AppendNotModifiedFields(b)
	case ranged || status == http.StatusRequestedRangeNotSatisfiable:
		b = o.AppendFieldsExcept(b, h1.ContentRange)
	default:
		b = o.AppendFields(b)
	}
	b = append(b, "Age: "...)
	b = strconv.AppendInt(b, o.Age(now), 10)
	b = append(b, "\r\n"...)
	b = l.appendCacheStatus(b, o, now, result)
	b = append(b, cfg.xCache[1][1]...) // served from the cache, found at lookup
	if result == resultRefreshUnmod && from != nil {
		b = appendProxyStatus(b, cfg.Name, *from, http.StatusNotModified)
	}
	if result == resultRefreshFailOld {
		// Why the answer is stale (RFC 9209).
		b = append(b, "Proxy-Status: "...)
		b = append(b, cfg.Name...)
		b = append(b, `; error=destination_unavailable; details="no next hop could be reached; a stale stored response was served"`+"\r\n"...)
	}
	b = cfg.appendVia(b, nil, false)
	length := o.Length()
	switch {
	case ranged:
		b = append(b, "Content-Range: bytes "...)
		b = strconv.AppendInt(b, first, 10)
		b = append(b, '-')
		b = strconv.AppendInt(b, last, 10)
		b = append(b, '/')
		b = strconv.AppendInt(b, total, 10)
		b = append(b, "\r\n"...)
		length = last - first + 1
	case status == http.StatusRequestedRangeNotSatisfiable:
		b = append(b, "Content-Range: bytes */"...)
		b = strconv.AppendInt(b, total, 10)
		b = append(b, "\r\n"...)
		length = 0
	}
	noBody := status == http.StatusNotModified || status == http.StatusNoContent || (status >= 100 && status < 200)
	if !noBody {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, length, 10)
		b = append(b, "\r\n"...)
	}
	b = append(w.connection(b, rq.req.Minor), "\r\n"...)
	l.out = b
	if w.writeHead(status, b) != nil {
		return
	}
	l.result = result
	l.ctype = append(l.ctype[:0], o.ContentType()...)
	if !noBody && rq.method != http.MethodHead && length > 0 {
		var err error
		switch {
		case o.OnDisk():
			if !ranged {
				first = first0 // the whole stored body
			}
			_, err = l.diskBody.WriteRange(w, first-first0, first-first0+length-1)
		case ranged:
			err = w.write(o.Slice(first, last))
		default:
			err = l.streamObject(o)
		}
		switch {
		case errors.Is(err, errObjectCut) && w.retract():
			// Nothing of it had left: an error made whole instead.
			e := errorf(http.StatusBadGateway, CodeBadGateway, "", "%v", err)
			l.out, _ = w.errorPage(e, rq.method == http.MethodHead, "", l.out)
			return
		case errors.Is(err, errObjectCut):
			// A cut the client must see: what it got so far goes out,
			// and the connection ends.
			w.last()
			w.flush()
			return
		case err != nil:
			w.abandon()
			return
		}
	}
	w.done(w.keeps() && l.side.quiet())
}

// appendCacheStatus appends this proxy's Cache-Status member (RFC 9211).
func (l *cacheLayer) appendCacheStatus(b []byte, o *cache.Object, now time.Time, result string) []byte {
	b = append(b, "Cache-Status: "...)
	b = append(b, l.rq.gen.cfg.Name...)
	switch {
	case result == resultRefreshFailOld:
		b = append(b, "; fwd=stale; ttl="...)
		b = strconv.AppendInt(b, o.TTL(now), 10)
		b = append(b, "; detail=no-next-hop"...)
	case result == resultRefreshUnmod:
		b = append(b, "; fwd=stale; fwd-status=304; ttl="...)
		b = strconv.AppendInt(b, o.TTL(now), 10)
	case l.collapsed:
		b = append(b, "; fwd=uri-miss; collapsed; ttl="...)
		b = strconv.AppendInt(b, o.TTL(now), 10)
	case l.swr:
		b = append(b, "; hit; ttl="...)
		b = strconv.AppendInt(b, o.TTL(now), 10)
		b = append(b, "; detail=stale-while-revalidate"...)
	default:
		b = append(b, "; hit; ttl="...)
		b = strconv.AppendInt(b, o.TTL(now), 10)
	}
	return append(b, "\r\n"...)
}

// after says what becomes of the connection after an answer from the
// cache (as txn.after).
func (l *cacheLayer) after() outcome {
	if l.w.keeps() {
		return keepOpen
	}
	return closeConn
}

// serveStale answers with a stale response because the next hops could
// not (RFC 9111 4.2.4), saying why in Proxy-Status.
func (l *cacheLayer) serveStale(o *cache.Object) {
	l.ch.Count(cache.OutcomeStale, false)
	l.serveObject(o, resultRefreshFailOld, nil)
}
