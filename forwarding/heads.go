package forwarding

// This file holds the message heads peerd writes: the request head for a
// hop (absolute URI or origin form, hop-by-hop fields removed, Via and
// X-Forwarded-For, the peer's login), the fields of the response heads to
// the client (Connection, Squid's X-Cache), and the sink a response is
// relayed through.

import (
	"net/http"
	"strconv"

	"github.com/peerd/peerd/internal/h1"
	"github.com/peerd/peerd/selection"
	"github.com/peerd/peerd/tracing"
)

// appendHead appends the request head for hop: absolute URI to peers,
// origin-form to the origin; hop-by-hop fields removed; Host from the
// URI; Via and X-Forwarded-For appended; the peer's login; framing by the
// body as peerd sends it.
func (rq *request) appendHead(b []byte, hop selection.Hop, role HopRole, span *attemptSpan) []byte {
	req := &rq.req
	cfg := rq.gen.cfg
	b = append(b, req.Method...)
	b = append(b, ' ')
	if hop.Peer != nil {
		b = append(b, req.Target...)
	} else {
		if len(req.PathQuery) == 0 || req.PathQuery[0] != '/' {
			b = append(b, '/')
		}
		b = append(b, req.PathQuery...)
	}
	b = append(b, " HTTP/1.1\r\nHost: "...)
	if req.HostBracketed {
		b = append(append(append(b, '['), req.Host...), ']')
	} else {
		b = append(b, req.Host...)
	}
	if len(req.Port) > 0 {
		b = append(append(b, ':'), req.Port...)
	}
	b = append(b, "\r\n"...)
	sibling := role.Sibling()
	b = role.Fields(b) // a key owner's signature
	stale := rq.stale
	var via, xff, cc bool
	for _, f := range req.Fields {
		switch {
		case cfg.reqRemove != nil && cfg.removes(f.Name):
			continue
		case len(f.Name) == len(memberField) && h1.EqualFold(f.Name, memberField):
			continue // a member's signature is for this peerd only
		case f.HopByHop(req.ConnTokens), f.Kind == h1.Host, f.Kind == h1.ProxyAuthorization, f.Kind == h1.Expect,
			f.Kind == h1.ContentLength, f.Kind == h1.MaxForwards && rq.maxFwd >= 0:
			continue
		case f.Kind == h1.Via:
			via = true
			continue
		case f.Kind == h1.XForwardedFor:
			xff = true
			continue
		case sibling && f.Kind == h1.CacheControl:
			cc = true
			continue
		case span != nil && len(f.Name) == len("traceparent") && h1.EqualFold(f.Name, "traceparent"):
			continue // this attempt is the next hop's parent span (below)
		case stale != nil && (f.Kind == h1.IfNoneMatch || f.Kind == h1.IfModifiedSince):
			// Revalidating: the cache's own validators go instead, and
			// the client's preconditions are answered from the result.
			continue
		}
		b = appendField(b, f.Name, f.Value)
	}
	if stale != nil {
		b = stale.AppendConditionals(b)
	}
	if span != nil {
		b = append(b, "traceparent: "...)
		b = append(tracing.AppendTraceparent(b, span.trace.Trace, span.id), "\r\n"...)
	}
	if !cfg.reqNoVia {
		b = cfg.appendVia(b, req.Fields, via)
	}
	b = cfg.appendXFF(b, req.Fields, xff, rq.from.str)
	if sibling {
		b = append(b, "Cache-Control: "...)
		if cc {
			b = appendValues(b, req.Fields, h1.CacheControl)
			if !hasDirective(req.Fields, "Cache-Control", "only-if-cached") {
				b = append(b, ", only-if-cached"...)
			}
		} else {
			b = append(b, "only-if-cached"...)
		}
		b = append(b, "\r\n"...)
	}
	if rq.maxFwd >= 0 {
		b = append(b, "Max-Forwards: "...)
		b = strconv.AppendInt(b, int64(rq.maxFwd), 10)
		b = append(b, "\r\n"...)
	}
	if hop.Peer != nil {
		if login := hop.Peer.Login(); login != "" {
			b = appendLogin(b, login, req)
		}
	}
	if rq.upgrade != nil {
		b = append(b, "Connection: Upgrade\r\nUpgrade: "...)
		b = append(append(b, rq.upgrade...), "\r\n"...)
	}
	switch body := &rq.body; {
	case body.state == streaming && req.Chunked, body.trailered():
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	case body.state == streaming:
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, req.ContentLength, 10)
		b = append(b, "\r\n"...)
	case body.state == buffered:
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(body.buf)), 10)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

// appendConnect appends the CONNECT request for a parent: the target,
// the client's User-Agent (unless removed), the peer's login and Via.
func (rq *request) appendConnect(b []byte, hop selection.Hop) []byte {
	req := &rq.req
	cfg := rq.gen.cfg
	b = append(b, "CONNECT "...)
	b = append(append(b, req.Target...), " HTTP/1.1\r\nHost: "...)
	b = append(append(b, req.Target...), "\r\n"...)
	if ua := req.Get("User-Agent"); ua != nil && !cfg.removes([]byte("User-Agent")) {
		b = appendField(b, []byte("User-Agent"), ua)
	}
	if login := hop.Peer.Login(); login != "" {
		b = appendLogin(b, login, req)
	}
	if !cfg.reqNoVia {
		b = cfg.appendVia(b, req.Fields, req.Get("Via") != nil)
	}
	return append(b, "\r\n"...)
}

// appendConnection appends the Connection field the answer needs, as the
// client writer decides it, and ends the head.
func (tx *txn) appendConnection(b []byte) []byte {
	return append(tx.w.connection(b, tx.rq.req.Minor), "\r\n"...)
}

// xCache is the X-Cache fields of an answer not served from the cache:
// whether a stored response was found for it.
func (tx *txn) xCache() string {
	if tx.rq.stale != nil {
		return tx.rq.gen.cfg.xCache[0][1]
	}
	return tx.rq.gen.cfg.xCache[0][0]
}

// errorFields are the fields peerd adds to an answer it makes itself, as
// Squid adds them to its error pages: X-Cache and Via.
func (tx *txn) errorFields() string {
	if tx.rq.gen.cfg.via == "" {
		return tx.xCache()
	}
	return tx.xCache() + "Via: " + tx.rq.gen.cfg.via + "\r\n"
}

// interimHead builds a 1xx head for the client.
func (rq *request) interimHead(b []byte, resp *h1.Response) []byte {
	b = appendStatusLine(b, resp)
	b = rq.appendResponseFields(b, resp, selection.Hop{})
	return append(b, "\r\n"...)
}

func appendStatusLine(b []byte, resp *h1.Response) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(resp.Status), 10)
	b = append(b, ' ')
	if len(resp.Reason) > 0 {
		b = append(b, resp.Reason...)
	} else {
		b = append(b, http.StatusText(resp.Status)...)
	}
	return append(b, "\r\n"...)
}

// appendResponseFields copies the end-to-end fields of resp (and a PASS
// peer's challenge, when hop is that peer) and appends Via, with peerd's
// entry unless via = false.
func (rq *request) appendResponseFields(b []byte, resp *h1.Response, hop selection.Hop) []byte {
	via := false
	// A peer that is sent the client's own credentials (login = "PASS")
	// may challenge the client for them (RFC 9110 11.7.1); any other
	// peer's challenge is for peerd, not the client.
	passAuth := resp.Status == http.StatusProxyAuthRequired && hop.Peer != nil && hop.Peer.Login() == "PASS"
	for _, f := range resp.Fields {
		switch {
		case f.HopByHop(resp.ConnTokens), f.Kind == h1.ContentLength, f.Kind == h1.ProxyAuthenticate && !passAuth:
			continue
		case f.Kind == h1.Via:
			via = true
			continue
		}
		b = appendField(b, f.Name, f.Value)
	}
	return rq.gen.cfg.appendVia(b, resp.Fields, via)
}

// xffMode is a [proxy] forwarded_for word, parsed.
type xffMode uint8

const (
	xffOn          xffMode = iota // append the client's address
	xffOff                        // append "unknown"
	xffTransparent                // pass the client's field unchanged
	xffDelete                     // send none
	xffTruncate                   // send only the client's address
)

var xffModes = map[string]xffMode{"on": xffOn, "off": xffOff, "transparent": xffTransparent, "delete": xffDelete, "truncate": xffTruncate}

// appendXFF appends X-Forwarded-For as forwarded_for says: has tells
// whether the request carries one, client is its sender's address.
func (c *runtimeConfig) appendXFF(b []byte, fields []h1.Field, has bool, client string) []byte {
	switch c.xff {
	case xffOff:
		return appendJoined(b, "X-Forwarded-For", fields, h1.XForwardedFor, has, "unknown")
	case xffTransparent:
		return appendOwn(b, "X-Forwarded-For", fields, h1.XForwardedFor, has)
	case xffDelete:
		return b
	case xffTruncate:
		return appendJoined(b, "X-Forwarded-For", nil, h1.XForwardedFor, false, client)
	}
	return appendJoined(b, "X-Forwarded-For", fields, h1.XForwardedFor, has, client)
}

// appendVia appends Via: the message's own entries (has tells whether it
// carries any), then peerd's, which via = false leaves out.
func (c *runtimeConfig) appendVia(b []byte, fields []h1.Field, has bool) []byte {
	if c.via == "" {
		return appendOwn(b, "Via", fields, h1.Via, has)
	}
	return appendJoined(b, "Via", fields, h1.Via, has, c.via)
}

// removes reports whether request_header_remove names the field.
func (c *runtimeConfig) removes(name []byte) bool {
	for _, r := range c.reqRemove {
		if h1.EqualFold(name, r) {
			return true
		}
	}
	return false
}

// appendOwn appends one field named name holding the values of the
// message's fields of kind k, unchanged; none when it has none.
func appendOwn(b []byte, name string, fields []h1.Field, k h1.Kind, has bool) []byte {
	if !has {
		return b
	}
	b = append(append(b, name...), ": "...)
	return append(appendValues(b, fields, k), "\r\n"...)
}

// appendJoined appends one field named name: the values of the message's
// fields of kind k (when it has any), then last, joined by ", " — how Via
// and X-Forwarded-For grow by a hop.
func appendJoined(b []byte, name string, fields []h1.Field, k h1.Kind, has bool, last string) []byte {
	b = append(append(b, name...), ": "...)
	if has {
		b = append(appendValues(b, fields, k), ", "...)
	}
	b = append(b, last...)
	return append(b, "\r\n"...)
}

// appendValues appends the values of every field of kind k, joined by
// ", ".
func appendValues(b []byte, fields []h1.Field, k h1.Kind) []byte {
	first := true
	for _, f := range fields {
		if f.Kind == k {
			if !first {
				b = append(b, ", "...)
			}
			b = append(b, f.Value...)
			first = false
		}
	}
	return b
}

// sink is where a relayed response goes: the client writer, or the
// cache's decorator around it, which stores what passes and may answer
// instead.
type sink interface {
	// offer is given a final response head before any of it is written:
	// handled means the sink answered the client itself (a 304 that
	// refreshed a stored response, a stale one standing in for a 5xx) and
	// released the attempt.
	offer(a *attempt) (handled bool, out outcome)
	// fields appends the sink's own fields to the head (Cache-Status).
	fields(b []byte, status int) []byte
	// body writes a piece of the body (last: the body is whole with it);
	// with the client gone a storing sink still keeps it.
	body(p []byte, last bool) error
	// keepOnAbort says whether a body goes on to its end after the client
	// left, having got bytes of length (-1: not known).
	keepOnAbort(got, length int64) bool
	// end says the relay is over (whole: the body arrived complete). It
	// reports whether the sink must settle after the client has the whole
	// answer, which must then be flushed, not left buffered.
	end(whole bool) (settle bool)
	// settle waits (briefly) for what end started: a response kept on
	// disk only is visible once it is committed.
	settle()
	// passThrough: the sink keeps nothing of the body (it may be moved
	// by the kernel, never seen).
	passThrough() bool
}
