package cache

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/peerd/peerd/internal/h1"
)

// The cache parses fields that come from the network: HTTP-dates, Range,
// Cache-Control, whole response heads. Where net/http parses the same
// thing it is the oracle.

// FuzzHTTPDate: every date peerd accepts, net/http's ParseTime accepts as
// the same instant. peerd is stricter (two-digit hours, single spaces) and
// more lenient only in the case of "GMT", and reads an RFC 850 year by
// RFC 9110's 50-year rule where Go pivots at 1969: those are compared
// without the year.
func FuzzHTTPDate(f *testing.F) {
	for _, s := range []string{
		"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994",
		"THU, 18 AUG 2050 02:01:18 gmt", "Thu, 18 Aug 2050 2:01:18 GMT", "Thu, 31 Feb 2050 02:01:18 GMT",
		"Thu, 18 Aug 2050 24:00:00 GMT", "0", "", "Thu, 18  Aug  2050 02:01:18 GMT",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseHTTPDate([]byte(s))
		if !ok {
			return
		}
		norm := s
		if n := len(s); n >= 3 && strings.EqualFold(s[n-3:], "gmt") {
			norm = s[:n-3] + "GMT"
		}
		want, err := http.ParseTime(norm)
		if err != nil {
			// time.Parse matches day and month names case-sensitively
			// in its layout only for the first letter; peerd takes any
			// case (cache-tests' "wrong case" checks). Retry in the
			// canonical case before calling it a mismatch.
			want, err = http.ParseTime(canonicalCase(norm))
		}
		if err != nil {
			t.Fatalf("peerd accepts %q (%v), net/http does not: %v", s, time.Unix(got, 0).UTC(), err)
		}
		g := time.Unix(got, 0).UTC()
		if strings.Contains(s, "-") {
			if g.Month() != want.Month() || g.Day() != want.Day() || g.Hour() != want.Hour() || g.Minute() != want.Minute() || g.Second() != want.Second() {
				t.Fatalf("%q: peerd %v, net/http %v", s, g, want)
			}
			return
		}
		if !g.Equal(want) {
			t.Fatalf("%q: peerd %v, net/http %v", s, g, want)
		}
	})
}

// canonicalCase writes day and month names as "Mon" and "Jan".
func canonicalCase(s string) string {
	b := []byte(s)
	word := 0
	for i := range b {
		c := b[i]
		isLetter := (c|0x20) >= 'a' && (c|0x20) <= 'z'
		switch {
		case !isLetter:
			word = 0
		case word == 0:
			b[i] = c &^ 0x20
			word++
		default:
			b[i] = c | 0x20
			word++
		}
	}
	out := string(b)
	if strings.HasSuffix(strings.ToUpper(out), "GMT") {
		out = out[:len(out)-3] + "GMT"
	}
	return out
}

// FuzzRange: a single range peerd serves is the range http.ServeContent
// serves for the same representation, and a range peerd calls
// unsatisfiable is one ServeContent answers 416.
func FuzzRange(f *testing.F) {
	for _, s := range []string{"bytes=0-1", "bytes=1-", "bytes=-1", "bytes=5-100", "bytes=20-", "bytes=-0", "bytes=0-1,3-4",
		"bytes= 0-1", "bytes=3-1", "bytes=", "Bytes=0-0", "bytes=00-01", "bytes=-20"} {
		f.Add(s, uint8(11))
	}
	f.Fuzz(func(t *testing.T, rng string, n uint8) {
		body := bytes.Repeat([]byte("x"), int(n))
		first, last, ok, unsat := byteRange([]byte(rng), int64(n))
		if (!ok && !unsat) || n == 0 {
			// peerd answers the whole response, as a server may; an
			// empty representation net/http never ranges.
			return
		}
		if longNumber(rng) {
			return // net/http refuses what overflows an int64; peerd saturates
		}
		// Range units compare case-insensitively (RFC 9110 14.1);
		// net/http takes "bytes=" only in lower case.
		canon := rng
		if t := strings.TrimLeft(rng, " \t"); len(t) >= 6 && strings.EqualFold(t[:6], "bytes=") {
			canon = "bytes=" + t[6:]
		}
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("Range", canon)
		rec := httptest.NewRecorder()
		http.ServeContent(rec, req, "", time.Time{}, bytes.NewReader(body))
		switch {
		case ok:
			if rec.Code != http.StatusPartialContent {
				t.Fatalf("Range %q of %d bytes: peerd serves %d-%d, net/http answers %d", rng, n, first, last, rec.Code)
			}
			want := "bytes " + itoa(first) + "-" + itoa(last) + "/" + itoa(int64(n))
			if got := rec.Header().Get("Content-Range"); got != want {
				t.Fatalf("Range %q of %d bytes: peerd %q, net/http %q", rng, n, want, got)
			}
		case unsat && strings.HasPrefix(strings.TrimLeft(canon[6:], " \t"), "-"):
			// A zero suffix-length is unsatisfiable (RFC 9110 14.1.1);
			// net/http serves something for it.
		case unsat:
			if rec.Code != http.StatusRequestedRangeNotSatisfiable {
				t.Fatalf("Range %q of %d bytes: peerd says unsatisfiable, net/http answers %d", rng, n, rec.Code)
			}
		}
	})
}

func longNumber(s string) bool {
	run := 0
	for i := 0; i < len(s); i++ {
		if s[i] >= '0' && s[i] <= '9' {
			if run++; run > 18 {
				return true
			}
		} else {
			run = 0
		}
	}
	return false
}

func itoa(n int64) string { return string(appendInt(nil, n)) }

func appendInt(b []byte, n int64) []byte {
	if n >= 10 {
		b = appendInt(b, n/10)
	}
	return append(b, byte('0'+n%10))
}

// FuzzCacheControl: the parser never panics, and a value split at its
// commas over several field lines (where no quoted string holds a comma)
// means the same directives.
func FuzzCacheControl(f *testing.F) {
	for _, s := range []string{"max-age=3600", `max-age="3600"`, "max-age='3600'", `extension="max-age=100", max-age=1`,
		"max-age =100", "no-cache, no-store", `no-cache="a, b", max-age=5`, "s-maxage=1, max-age=3600", "max-stale",
		`private="Set-Cookie"`, "max-age=99999999999", `a="\"", max-age=2`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var one Directives
		parseCC(&one, []byte(s))
		if one.has(ccMaxAge) && (one.MaxAge < 0 || one.MaxAge > maxDelta) {
			t.Fatalf("%q: max-age %d out of range", s, one.MaxAge)
		}
		if strings.ContainsAny(s, `"\`) {
			return
		}
		var split Directives
		for _, part := range strings.Split(s, ",") {
			parseCC(&split, []byte(part))
		}
		if one.flags != split.flags || one.MaxAge != split.MaxAge || one.SMaxAge != split.SMaxAge {
			t.Fatalf("%q: one line %+v, split %+v", s, one, split)
		}
	})
}

// FuzzStoredResponse: any response head h1 accepts is either refused by
// the cache or stored without its hop-by-hop and framing fields, and
// serving it never panics.
func FuzzStoredResponse(f *testing.F) {
	f.Add("HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nConnection: a\r\na: 1\r\nVary: Foo\r\nContent-Length: 2\r\n\r\n", "Foo: 1")
	f.Add("HTTP/1.1 206 Partial Content\r\nCache-Control: max-age=60\r\nContent-Range: bytes 0-1/10\r\nContent-Length: 2\r\n\r\n", "Range: bytes=0-1")
	f.Add("HTTP/1.1 200 OK\r\nExpires: 0\r\nETag: W/\"x\"\r\nLast-Modified: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n", "If-None-Match: *")
	f.Fuzz(func(t *testing.T, head, reqField string) {
		var resp h1.Response
		if h1.ParseResponse([]byte(head), &resp) != nil {
			return
		}
		reqHead := "GET http://example.com/a HTTP/1.1\r\nHost: example.com\r\n" + reqField + "\r\n\r\n"
		var hr h1.Request
		if h1.ParseRequest([]byte(reqHead), &hr) != nil {
			return
		}
		c := New(DefaultConfig())
		r := &Request{}
		r.Reset("GET", hr.Fields)
		r.Key = AppendKey(r.Key, hr.Scheme, hr.Host, hr.Port, hr.PathQuery)
		body := []byte("01")
		w := c.Admit(r, &resp, int64(len(body)), t0, t0, nil)
		if w == nil {
			return
		}
		w.Write(body)
		w.Finish(true)
		o, _ := c.Lookup(r, t0)
		if o == nil {
			return
		}
		eachLine(o.fields, func(name, _ []byte) {
			switch kind(name) {
			case h1.Connection, h1.KeepAlive, h1.TransferEncoding, h1.ContentLength, h1.Age, h1.Upgrade, h1.ProxyConnection, h1.TE:
				t.Fatalf("stored %q from %q", name, head)
			}
			for _, tok := range resp.ConnTokens {
				if equalFold(name, string(tok)) {
					t.Fatalf("stored %q, which Connection names, from %q", name, head)
				}
			}
		})
		o.NotModified(r)
		o.RangeFor(r)
		o.AppendNotModifiedFields(nil)
		o.Age(t0.Add(time.Hour))
	})
}
