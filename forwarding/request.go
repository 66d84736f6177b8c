package forwarding

// This file holds a request as every part of the engine reads it: the
// parsed head, its method and destination, the config generation it is
// served under, what the cache adds to it, and its body (buffered for a
// retry, or streamed). The transaction fills it in before the walk; the
// walker, its attempts and the cache only read it, so a hedge on another
// goroutine may read it too.

import (
	"bytes"
	"io"
	"net"
	"net/netip"
	"strconv"
	"time"
	"unsafe"

	"github.com/peerd/peerd/tracing"

	"github.com/peerd/peerd/cache"
	"github.com/peerd/peerd/internal/h1"
)

// client is who sent a request: its connection's address.
type client struct {
	addr netip.Addr
	ok   bool   // addr is known
	str  string // addr as text (X-Forwarded-For, the access log)
	port uint16 // 0: not known
}

// request is one client request.
type request struct {
	gen   *generation
	from  *client
	start time.Time
	// trace is the request's trace when it is sampled (trace.go).
	trace  *tracing.Request
	head   []byte // the request head, copied out of the connection's buffer
	req    h1.Request
	method string // shared constants for the common methods: no allocation
	port   int    // the destination port (the URL's, or its scheme's)
	// user is the authenticated user ([auth]); claimed the user a wrong
	// credential named (the access log's). "" without.
	user, claimed string
	upgrade       []byte // the Upgrade offered on, when the policy allows it
	maxFwd        int    // Max-Forwards to send on, -1 for none
	facts         facts
	// stale is the stored response the request revalidates (set by the
	// cache): its validators are sent instead of the client's.
	stale *cache.Object
	body  reqBody
	// vouched: a fleet member sent the request, signed (fleet.go): it
	// passed [proxy] allow and [[rule]] at that member, and is answered
	// here as its key's owner.
	vouched bool
}

// body states of a request.
const (
	noBody uint8 = iota
	buffered
	streaming
)

// reqBody is the request's body as read from the client: buffered whole
// when it fits max_retry_body (so the request can be sent again), else
// the buffered part and then the rest streamed as it arrives.
type reqBody struct {
	state uint8
	r     h1.BodyReader
	buf   []byte
	done  bool // read to its end (or there was none)
	// The client connection's deadlines and request_timeout, for reads
	// of a streamed body, and its writer, told when the client is lost.
	dl      *deadlines
	timeout time.Duration
	w       *clientWriter
}

// reset makes r a new request's, keeping its buffers.
func (r *request) reset(g *generation, from *client, start time.Time) {
	hd, req, buf, br := r.head[:0], r.req, r.body.buf[:0], r.body.r
	dl, w := r.body.dl, r.body.w
	*r = request{gen: g, from: from, start: start, head: hd, req: req, maxFwd: -1}
	r.body = reqBody{r: br, buf: buf, done: true, dl: dl, w: w, timeout: g.cfg.RequestTimeout}
}

// hasBody reports whether the client sends a body with the request.
func (r *request) hasBody() bool { return r.req.Chunked || r.req.ContentLength > 0 }

// https reports whether the request's URL is https.
func (r *request) https() bool {
	return r.req.Form == h1.AbsoluteForm && h1.EqualFold(r.req.Scheme, "https")
}

// read buffers up to max_retry_body of the body from cr, so that the
// request can be sent again; a longer body streams (the buffered part,
// then the rest) and makes the request non-retriable once written.
func (b *reqBody) read(cr *h1.Reader, req *h1.Request, max int64, maxHeader int) error {
	kind := h1.LengthBody
	if req.Chunked {
		kind = h1.ChunkedBody
	}
	b.r.Reset(cr, kind, req.ContentLength, maxHeader)
	if !req.Chunked && req.ContentLength > max {
		b.state = streaming
		return nil
	}
	for int64(len(b.buf)) <= max {
		b.dl.readIn(time.Now(), b.timeout)
		if len(b.buf) == cap(b.buf) {
			b.buf = append(b.buf, 0)[:len(b.buf)]
		}
		n, err := b.r.Read(b.buf[len(b.buf):min(cap(b.buf), int(max)+1)])
		b.buf = b.buf[:len(b.buf)+n]
		if err == io.EOF {
			b.state, b.done = buffered, true
			return nil
		}
		if err != nil {
			b.broke(err)
			return err
		}
	}
	b.state = streaming
	return nil
}

// next reads the next piece of a streamed body into p.
func (b *reqBody) next(p []byte) (int, error) {
	b.dl.readIn(time.Now(), b.timeout)
	n, err := b.r.Read(p)
	switch {
	case err == io.EOF:
		b.done = true
	case err != nil:
		b.broke(err)
	}
	return n, err
}

// broke tells the client writer of a body read that failed.
func (b *reqBody) broke(err error) { b.w.readFailed(err) }

// trailered: a buffered body that came chunked with trailer fields is sent
// on chunked, to keep them.
func (b *reqBody) trailered() bool { return b.state == buffered && len(b.r.Trailer) > 0 }

var methods = [...]string{"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "TRACE", "PATCH", "CONNECT"}

// knownMethods are the methods Squid knows by name besides those: with
// them, a method in any case is taken as that method.
var knownMethods = [...]string{"PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK", "SEARCH",
	"REPORT", "MKACTIVITY", "CHECKOUT", "MERGE", "PURGE"}

// canonicalMethod writes a known method that the client sent in another
// case ("put", "Get") in capitals, in place in the request head, so that
// every check, the cache and every next hop see the one method Squid's
// relaxed parser would make of it (a rule on PUT is not passed by "put",
// which a Squid parent would forward as PUT). Other methods are kept as
// sent; rules compare them without regard to case.
func canonicalMethod(head []byte) {
	sp := bytes.IndexByte(head, ' ')
	if sp <= 0 || sp > len("MKACTIVITY") {
		return
	}
	m := head[:sp]
	lower := false
	for _, c := range m {
		lower = lower || 'a' <= c && c <= 'z'
	}
	if !lower {
		return
	}
	for _, k := range methods {
		if h1.EqualFold(m, k) {
			copy(m, k)
			return
		}
	}
	for _, k := range knownMethods {
		if h1.EqualFold(m, k) {
			copy(m, k)
			return
		}
	}
}

// methodString returns m as a string, without allocating for the common
// methods.
func methodString(m []byte) string {
	for _, s := range methods {
		if string(m) == s {
			return s
		}
	}
	return string(m)
}

// splitLines splits a head into its lines, without CRLF, up to the blank
// line.
func splitLines(head []byte) [][]byte {
	var out [][]byte
	for len(head) > 0 {
		i := 0
		for i+1 < len(head) && !(head[i] == '\r' && head[i+1] == '\n') {
			i++
		}
		if i == 0 {
			break
		}
		out = append(out, head[:i])
		head = head[min(i+2, len(head)):]
	}
	return out
}

// urlString views the request target as a string for the planner, which
// only hashes it while the plan is built.
func urlString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// destination is where the request goes, as a parent is told it cannot
// reach it and as a probe through that parent asks it again: the
// origin's scheme, host and port ("http://example.com:80"), or a
// tunnel's host and port ("example.com:443").
func (r *request) destination() string {
	hp := net.JoinHostPort(string(r.req.Host), strconv.Itoa(r.port))
	if r.facts.tunnel {
		return hp
	}
	if r.https() {
		return "https://" + hp
	}
	return "http://" + hp
}
