package h1

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"slices"
	"testing"
)

// The differential tests: the same bytes go to h1 and to net/http, the
// oracle. Whatever net/http rejects, h1 must reject; where both accept,
// they must agree on the method, the target, the header fields, the body
// framing and the body (with its trailers).

// vector is a seed with the verdict h1 must give it (nil: accepted).
type vector struct {
	req  string
	want error
}

// smuggling is the seed corpus: the known request smuggling and parser
// confusion vectors, and inputs that got past peerd's earlier scanner.
var smuggling = []vector{
	{"GET http://o.test/ HTTP/1.1\r\nHost: o.test\r\n\r\n", nil},
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nContent-Length: 5\r\n\r\nhello", nil},
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", nil},
	// CL and TE together, in both orders and with TE variants.
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nG", ErrCLAndTE},
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nTransfer-Encoding: chunked\r\nContent-Length: 6\r\n\r\n0\r\n\r\nG", ErrCLAndTE},
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", ErrTransferEncoding},
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", ErrTransferEncoding},
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", ErrTransferEncoding},
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n", ErrFieldName},
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nTransfer-Encoding:\tchunked\r\n\r\n0\r\n\r\n", nil},
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nTransfer-Encoding: CHUNKED\r\n\r\n0\r\n\r\n", nil},
	// Duplicate and differing Content-Length.
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", ErrContentLength},
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", nil},
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nContent-Length: 3, 3\r\n\r\nabc", ErrContentLength},
	// Found by FuzzRequest: equal lengths written differently.
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nContent-Length: 03\r\nContent-Length: 3\r\n\r\nabc", ErrContentLength},
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nContent-Length: +3\r\n\r\nabc", ErrContentLength},
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nContent-Length: 0x3\r\n\r\nabc", ErrContentLength},
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nContent-Length: 99999999999999999999\r\n\r\n", ErrContentLength},
	// obs-fold, bare CR and LF, NUL.
	{"GET http://o.test/ HTTP/1.1\r\nHost: o.test\r\nX-A: a\r\n b\r\n\r\n", ErrObsFold},
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n", ErrObsFold},
	{"GET http://o.test/ HTTP/1.1\nHost: o.test\n\n", ErrBareLF},
	{"GET http://o.test/ HTTP/1.1\r\nHost: o.test\rX-A: b\r\n\r\n", ErrFieldValue},
	{"GET http://o.test/ HTTP/1.1\r\nHost: o.test\r\nX-A: a\x00b\r\n\r\n", ErrFieldValue},
	{"GET http://o.test/\x00 HTTP/1.1\r\nHost: o.test\r\n\r\n", ErrRequestLine},
	// Chunk sizes: overflow, extensions, bad ends.
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\nx\r\n0\r\n\r\n", ErrChunkSize},
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\nx\r\n0\r\n\r\n", ErrChunkSize},
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0;x\r\n\r\n", nil},
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nTransfer-Encoding: chunked\r\n\r\n5 ;ext\r\nhello\r\n0\r\n\r\n", ErrChunkSize},
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\n0\n\n", ErrChunkSize},
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n", ErrChunkEnd},
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n", ErrChunkSize},
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n", nil},
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nTransfer-Encoding: chunked\r\nTrailer: Content-Length\r\n\r\n0\r\nContent-Length: 5\r\n\r\n", ErrTrailerField},
	// HTTP/1.0 with TE, HTTP/0.9, other versions.
	{"POST http://o.test/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc", ErrTEOnHTTP10},
	{"GET /\r\n\r\n", ErrRequestLine},
	{"GET http://o.test/ HTTP/1.9\r\nHost: o.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", ErrVersion},
	{"GET http://o.test/ HTTP/2.0\r\nHost: o.test\r\n\r\n", ErrVersion},
	{"GET http://o.test/ http/1.1\r\nHost: o.test\r\n\r\n", ErrRequestLine},
	// Methods: lowercase and hyphenated are tokens, and must still be
	// checked for CL+TE.
	{"get http://o.test/ HTTP/1.1\r\nHost: o.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", ErrCLAndTE},
	{"M-SEARCH http://o.test/ HTTP/1.1\r\nHost: o.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", ErrCLAndTE},
	{"G(T http://o.test/ HTTP/1.1\r\nHost: o.test\r\n\r\n", ErrMethod},
	// Absolute URI against Host.
	{"GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n", nil},
	{"GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\nHost: c.test\r\n\r\n", ErrHost},
	{"GET http://a.test/ HTTP/1.1\r\n\r\n", ErrHost},
	{"GET http://user:pw@a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", ErrTarget},
	{"GET http://a.test:99999/ HTTP/1.1\r\nHost: a.test\r\n\r\n", ErrTarget},
	{"GET http://[::1]:80/x?y HTTP/1.1\r\nHost: [::1]\r\n\r\n", nil},
	{"GET http://a.test/%zz HTTP/1.1\r\nHost: a.test\r\n\r\n", ErrTarget},
	{"GET http://a.test/\xc3\xa9|{} HTTP/1.1\r\nHost: a.test\r\n\r\n", nil},
	{"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n", nil},
	{"CONNECT a.test HTTP/1.1\r\nHost: a.test\r\n\r\n", ErrTarget},
	{"OPTIONS * HTTP/1.1\r\nHost: a.test\r\n\r\n", nil},
	// CL+TE text inside an earlier request's body: framing must not be
	// guessed from body bytes.
	{"POST http://o.test/ HTTP/1.1\r\nHost: o.test\r\nContent-Length: 74\r\n\r\nGET http://o.test/ HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", nil},
	{"GET http://o.test/ HTTP/1.1\r\nHost: o.test\r\nExpect: 100-continue\r\n\r\n", nil},
	{"GET http://o.test/ HTTP/1.1\r\nHost: o.test\r\nConnection: close, X-Hop\r\nX-Hop: 1\r\n\r\n", nil},
	{"\r\nGET http://o.test/ HTTP/1.1\r\nHost: o.test\r\n\r\n", ErrEmptyLine},
	{" GET http://o.test/ HTTP/1.1\r\nHost: o.test\r\n\r\n", ErrRequestLine},
	{"GET  http://o.test/ HTTP/1.1\r\nHost: o.test\r\n\r\n", ErrRequestLine},
	{"GET http://o.test/ HTTP/1.1\r\n Host: o.test\r\n\r\n", ErrObsFold},
	{"GET http://o.test/ HTTP/1.1\r\n: empty\r\nHost: o.test\r\n\r\n", ErrFieldLine},
}

// message is a parsed message as both parsers report it.
type message struct {
	start   string // method + target, or status
	host    string // a request's Host: the target's authority, else the field
	header  map[string][]string
	length  int64 // -1: chunked
	body    string
	trailer map[string][]string
}

func (m message) String() string {
	return fmt.Sprintf("%s host=%q len=%d body=%q header=%v trailer=%v", m.start, m.host, m.length, m.body, m.header, m.trailer)
}

// normalize drops the fields net/http rewrites (framing fields, and
// Pragma's Cache-Control) so the two views compare.
func normalize(h map[string][]string) map[string][]string {
	out := map[string][]string{}
	for k, v := range h {
		switch k {
		case "Transfer-Encoding", "Content-Length", "Trailer", "Cache-Control", "Pragma", "Host":
			continue
		}
		out[k] = v
	}
	return out
}

func fieldMap(fs []Field) map[string][]string {
	m := map[string][]string{}
	for _, f := range fs {
		k := textproto.CanonicalMIMEHeaderKey(string(f.Name))
		m[k] = append(m[k], string(f.Value))
	}
	return m
}

func oursRequest(data []byte) (message, error) {
	r := NewReader(bytes.NewReader(data), 4096)
	head, err := r.ReadHead(1 << 20)
	if err != nil {
		return message{}, err
	}
	var req Request
	if err := ParseRequest(head, &req); err != nil {
		return message{}, err
	}
	m := message{start: string(req.Method) + " " + string(req.Target), header: normalize(fieldMap(req.Fields)), host: string(req.Get("Host"))}
	if req.Form == AbsoluteForm || req.Form == AuthorityForm {
		m.host = string(req.Host)
		if req.HostBracketed {
			m.host = "[" + m.host + "]"
		}
		if len(req.Port) > 0 {
			m.host += ":" + string(req.Port)
		}
	}
	kind, n := NoBody, int64(0)
	switch {
	case req.Chunked:
		kind, m.length = ChunkedBody, -1
	case req.ContentLength > 0:
		kind, n, m.length = LengthBody, req.ContentLength, req.ContentLength
	}
	r.Release(head)
	var br BodyReader
	br.Reset(r, kind, n, 4000)
	body, err := io.ReadAll(&br)
	m.body = string(body)
	if len(br.Trailer) > 0 {
		m.trailer = fieldMap(br.Trailer)
	}
	return m, err
}

func goRequest(data []byte) (message, error) {
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(data)))
	if err != nil {
		return message{}, err
	}
	m := message{start: req.Method + " " + req.RequestURI, header: normalize(req.Header), length: req.ContentLength, host: req.Host}
	body, err := io.ReadAll(req.Body)
	m.body = string(body)
	m.trailer = received(req.Trailer)
	return m, err
}

// received drops the trailer names net/http lists from the Trailer field
// without a value having arrived.
func received(h http.Header) map[string][]string {
	var m map[string][]string
	for k, v := range h {
		if v != nil {
			if m == nil {
				m = map[string][]string{}
			}
			m[k] = v
		}
	}
	return m
}

func FuzzRequest(f *testing.F) {
	for _, v := range smuggling {
		f.Add([]byte(v.req))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ours, oerr := oursRequest(data)
		theirs, gerr := goRequest(data)
		if gerr != nil {
			if oerr == nil {
				t.Fatalf("net/http rejects (%v) what h1 accepts: %q\nh1: %v", gerr, data, ours)
			}
			return
		}
		if oerr != nil {
			return // stricter than net/http: allowed
		}
		compare(t, data, ours, theirs)
	})
}

func compare(t *testing.T, data []byte, ours, theirs message) {
	t.Helper()
	same := ours.start == theirs.start && ours.host == theirs.host && ours.length == theirs.length && ours.body == theirs.body &&
		sameFields(ours.header, theirs.header) && sameFields(ours.trailer, theirs.trailer)
	if !same {
		t.Fatalf("h1 and net/http disagree on %q\nh1:       %v\nnet/http: %v", data, ours, theirs)
	}
}

func sameFields(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

var responseSeeds = []string{
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
	"HTTP/1.0 200 OK\r\n\r\nclose delimited",
	"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n",
	"HTTP/1.1 100 Continue\r\n\r\n",
	"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1  200 OK\r\n\r\n",
	"HTTP/1.1 +20 OK\r\n\r\n",
	"HTTP/1.1 999 X\r\n\r\n",
	"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n",
	"HTTP/1.1 200 OK\nContent-Length: 0\n\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
	"HTTP/2 200\r\n\r\n",
}

func oursResponse(data []byte, head bool) (message, error) {
	r := NewReader(bytes.NewReader(data), 4096)
	h, err := r.ReadHead(1 << 20)
	if err != nil {
		return message{}, err
	}
	var resp Response
	if err := ParseResponse(h, &resp); err != nil {
		return message{}, err
	}
	m := message{start: fmt.Sprint(resp.Status), header: normalize(fieldMap(resp.Fields))}
	kind := resp.BodyFor(head)
	r.Release(h)
	var br BodyReader
	br.Reset(r, kind, resp.ContentLength, 4000)
	body, err := io.ReadAll(&br)
	m.body = string(body)
	if len(br.Trailer) > 0 {
		m.trailer = fieldMap(br.Trailer)
	}
	return m, err
}

func goResponse(data []byte, head bool) (message, error) {
	method := "GET"
	if head {
		method = "HEAD"
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(data)), &http.Request{Method: method})
	if err != nil {
		return message{}, err
	}
	m := message{start: fmt.Sprint(resp.StatusCode), header: normalize(resp.Header)}
	body, err := io.ReadAll(resp.Body)
	m.body = string(body)
	m.trailer = received(resp.Trailer)
	return m, err
}

func FuzzResponse(f *testing.F) {
	for _, s := range responseSeeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, head bool) {
		ours, oerr := oursResponse(data, head)
		theirs, gerr := goResponse(data, head)
		if gerr != nil {
			if oerr == nil {
				t.Fatalf("net/http rejects (%v) what h1 accepts: %q (head %v)\nh1: %v", gerr, data, head, ours)
			}
			return
		}
		if oerr != nil {
			return
		}
		// Lengths are not compared: net/http reports a HEAD response's
		// Content-Length, h1 the body actually read.
		ours.length, theirs.length = 0, 0
		compare(t, data, ours, theirs)
	})
}

// TestSmugglingVectors pins h1's verdict on every seed, whatever net/http
// does with it.
func TestSmugglingVectors(t *testing.T) {
	for _, v := range smuggling {
		if _, err := oursRequest([]byte(v.req)); err != v.want {
			t.Errorf("%q: got %v; want %v", v.req, err, v.want)
		}
	}
}
