package cache

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/peerd/peerd/internal/h1"
)

// The tests of this file follow RFC 9111 section by section. Times are
// explicit: t0 is when the response arrived, and the cache is asked at
// t0+elapsed.

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func httpDate(t time.Time) string { return t.UTC().Format("Mon, 02 Jan 2006 15:04:05 GMT") }

// rel renders a Date-style field relative to t0 ("Date: {0}" → t0).
func rel(s string) string {
	for _, d := range []int{-100000, -86400, -30000, -5000, -3000, -2000, -10, 0, 10, 20, 300, 400, 5000, 100000} {
		s = strings.ReplaceAll(s, fmt.Sprintf("{%d}", d), httpDate(t0.Add(time.Duration(d)*time.Second)))
	}
	return s
}

func testCache(t testing.TB) *Cache {
	t.Helper()
	c := New(DefaultConfig())
	if c == nil {
		t.Fatal("New returned nil for the default config")
	}
	return c
}

// request builds a cache Request from a request head's fields.
func request(t testing.TB, method, url string, fields ...string) *Request {
	t.Helper()
	head := method + " " + url + " HTTP/1.1\r\nHost: example.com\r\n"
	for _, f := range fields {
		head += rel(f) + "\r\n"
	}
	head += "\r\n"
	var hr h1.Request
	if err := h1.ParseRequest([]byte(head), &hr); err != nil {
		t.Fatalf("request %q: %v", head, err)
	}
	r := &Request{}
	r.Reset(method, hr.Fields)
	r.Key = AppendKey(r.Key, hr.Scheme, hr.Host, hr.Port, hr.PathQuery)
	return r
}

// response parses a response head.
func response(t testing.TB, status string, fields ...string) *h1.Response {
	t.Helper()
	head := "HTTP/1.1 " + status + "\r\n"
	for _, f := range fields {
		head += rel(f) + "\r\n"
	}
	head += "\r\n"
	var resp h1.Response
	if err := h1.ParseResponse([]byte(head), &resp); err != nil {
		t.Fatalf("response %q: %v", head, err)
	}
	return &resp
}

// keep stores a response to r with body, received at t0 (asked at
// t0-delay), and reports whether it was kept.
func keep(t testing.TB, c *Cache, r *Request, resp *h1.Response, body string) bool {
	t.Helper()
	w := c.Admit(r, resp, int64(len(body)), t0, t0, nil)
	if w == nil {
		return false
	}
	w.Write([]byte(body))
	w.Finish(true)
	return true
}

const url = "http://example.com/a"

// 3: storing responses; 5.2.2.5 no-store, 5.2.2.7 private; 3.5
// Authorization.
func TestStoringResponses(t *testing.T) {
	cases := []struct {
		name   string
		req    []string
		method string
		status string
		resp   []string
		stored bool
	}{
		{"max-age", nil, "GET", "200 OK", []string{"Cache-Control: max-age=60"}, true},
		{"no freshness, no validator", nil, "GET", "200 OK", nil, false},
		{"validator only: stored to revalidate", nil, "GET", "200 OK", []string{`ETag: "a"`}, true},
		{"no-store", nil, "GET", "200 OK", []string{"Cache-Control: max-age=60, no-store"}, false},
		{"No-StOrE case", nil, "GET", "200 OK", []string{"Cache-Control: No-StOrE"}, false},
		{"private", nil, "GET", "200 OK", []string{"Cache-Control: private, max-age=60"}, false},
		{"private=field keeps the rest", nil, "GET", "200 OK", []string{`Cache-Control: private="Set-Cookie", max-age=60`}, true},
		{"request no-store", []string{"Cache-Control: no-store"}, "GET", "200 OK", []string{"Cache-Control: max-age=60"}, false},
		{"Authorization", []string{"Authorization: x"}, "GET", "200 OK", []string{"Cache-Control: max-age=60"}, false},
		{"Authorization + public", []string{"Authorization: x"}, "GET", "200 OK", []string{"Cache-Control: max-age=60, public"}, true},
		{"Authorization + must-revalidate", []string{"Authorization: x"}, "GET", "200 OK", []string{"Cache-Control: max-age=60, must-revalidate"}, true},
		{"Authorization + s-maxage", []string{"Authorization: x"}, "GET", "200 OK", []string{"Cache-Control: s-maxage=60"}, true},
		{"POST", nil, "POST", "200 OK", []string{"Cache-Control: max-age=60"}, false},
		{"304 is never stored", nil, "GET", "304 Not Modified", []string{"Cache-Control: max-age=60"}, false},
		{"599 explicit freshness", nil, "GET", "599 Whatever", []string{"Cache-Control: max-age=60"}, true},
		{"201 heuristic: not", nil, "GET", "201 Created", []string{"Last-Modified: {-86400}", "Date: {0}"}, false},
		{"404 heuristic", nil, "GET", "404 Not Found", []string{"Last-Modified: {-86400}", "Date: {0}"}, true},
		{"599 public heuristic", nil, "GET", "599 Unknown", []string{"Cache-Control: public", "Last-Modified: {-86400}", "Date: {0}"}, true},
		{"Vary: *", nil, "GET", "200 OK", []string{"Cache-Control: max-age=60", "Vary: *"}, false},
		{"Vary: Foo, *", nil, "GET", "200 OK", []string{"Cache-Control: max-age=60", "Vary: Foo, *"}, false},
		{"Set-Cookie, heuristic only: not stored", nil, "GET", "200 OK", []string{"Last-Modified: {-86400}", "Date: {0}", "Set-Cookie: SESSIONID=1"}, false},
		{"Set-Cookie, validator only: not stored", nil, "GET", "200 OK", []string{`ETag: "a"`, "Set-Cookie: SESSIONID=1"}, false},
		{"Set-Cookie with max-age: stored without it", nil, "GET", "200 OK", []string{"Cache-Control: max-age=60", "Set-Cookie: SESSIONID=1"}, true},
		{"206 without Range asked", nil, "GET", "206 Partial Content", []string{"Cache-Control: max-age=60", "Content-Range: bytes 0-1/10"}, false},
		{"206 to a range", []string{"Range: bytes=0-1"}, "GET", "206 Partial Content", []string{"Cache-Control: max-age=60", "Content-Range: bytes 0-1/10", "Content-Length: 2"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := testCache(t)
			r := request(t, tc.method, url, tc.req...)
			body := "01"
			if got := keep(t, c, r, response(t, tc.status, tc.resp...), body); got != tc.stored {
				t.Fatalf("stored = %v, want %v", got, tc.stored)
			}
		})
	}
}

// 4.2.1: calculating the freshness lifetime.
func TestFreshnessLifetime(t *testing.T) {
	cases := []struct {
		resp     []string
		lifetime int64
	}{
		{[]string{"Cache-Control: max-age=3600"}, 3600},
		{[]string{`Cache-Control: max-age="3600"`}, 3600},
		{[]string{"Cache-Control: max-age='3600'"}, 0},
		{[]string{"Cache-Control: MaX-AgE=3600"}, 3600},
		{[]string{"Cache-Control: max-age=003600"}, 3600},
		{[]string{"Cache-Control: max-age =100"}, 0},
		{[]string{"Cache-Control: max-age= 100"}, 0},
		{[]string{"Cache-Control: max-age=a100"}, 0},
		{[]string{"Cache-Control: max-age=100a"}, 0},
		{[]string{"Cache-Control: max-age=-100"}, 0},
		{[]string{"Cache-Control: max-age=2147483648"}, 1 << 31},
		{[]string{"Cache-Control: max-age=99999999999"}, 1 << 31},
		{[]string{`Cache-Control: extension="max-age=100", max-age=1`}, 1},
		{[]string{`Cache-Control: max-age=1, extension="max-age=100"`}, 1},
		{[]string{"Cache-Control: foobar, max-age=3600"}, 3600},
		{[]string{"Cache-Control: max-age=1800, max-age=1"}, 1800},
		{[]string{"Cache-Control: max-age=3600, s-maxage=1"}, 1},
		{[]string{"Cache-Control: max-age=1, s-maxage=3600"}, 3600},
		{[]string{"Cache-Control: max-age=3600", "Cache-Control: s-maxage=1"}, 1},
		{[]string{"Cache-Control: max-age=3600", "Expires: {-5000}", "Date: {0}"}, 3600},
		{[]string{"Cache-Control: max-age=0", "Expires: {5000}", "Date: {0}"}, 0},
		{[]string{"Expires: {5000}", "Date: {0}"}, 5000},
		{[]string{"Expires: {300}", "Date: {400}"}, 0},
		{[]string{"Expires: 0", "Date: {0}"}, 0},
		{[]string{"Expires: {0}", "Date: {0}"}, 0},
		{[]string{"Expires: {10}", "Date: foo"}, 10},
		{[]string{"Expires: {5000}", "Date: {0}", "Last-Modified: {-100000}"}, 5000},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.resp, " | "), func(t *testing.T) {
			c := testCache(t)
			r := request(t, "GET", url)
			o, ok := c.build(r, response(t, "200 OK", append(tc.resp, `ETag: "x"`)...), t0, t0)
			if !ok {
				t.Fatal("not storable")
			}
			if o.lifetime != tc.lifetime {
				t.Fatalf("lifetime = %d, want %d", o.lifetime, tc.lifetime)
			}
		})
	}
}

// 4.2.2: heuristic freshness, for the statuses cacheable by default only.
func TestHeuristicFreshness(t *testing.T) {
	for _, tc := range []struct {
		status string
		cc     string
		want   int64
	}{
		{"200 OK", "", 8640},
		{"203 Non-Authoritative Information", "", 8640},
		{"204 No Content", "", 8640},
		{"404 Not Found", "", 8640},
		{"410 Gone", "", 8640},
		{"501 Not Implemented", "", 8640},
		{"201 Created", "", 0},
		{"403 Forbidden", "", 0},
		{"502 Bad Gateway", "", 0},
		{"503 Service Unavailable", "", 0},
		{"599 Unknown", "", 0},
		{"599 Unknown", "Cache-Control: public", 8640},
	} {
		t.Run(tc.status+" "+tc.cc, func(t *testing.T) {
			c := testCache(t)
			fields := []string{"Last-Modified: {-86400}", "Date: {0}", `ETag: "x"`}
			if tc.cc != "" {
				fields = append(fields, tc.cc)
			}
			o, ok := c.build(request(t, "GET", url), response(t, tc.status, fields...), t0, t0)
			got := int64(0)
			if ok {
				got = o.lifetime
			}
			if got != tc.want {
				t.Fatalf("heuristic lifetime = %d, want %d (10%% of a day since Last-Modified)", got, tc.want)
			}
		})
	}
	// Capped by heuristic_max.
	cfg := DefaultConfig()
	cfg.HeuristicMax = time.Hour
	c := New(cfg)
	o, _ := c.build(request(t, "GET", url), response(t, "200 OK", "Last-Modified: {-100000}", "Date: {0}"), t0, t0)
	if o.lifetime != 3600 {
		t.Fatalf("heuristic lifetime = %d, want the 1h cap", o.lifetime)
	}
}

// 4.2.3: calculating age; 4.2: fresh or stale at a time.
func TestAge(t *testing.T) {
	for _, tc := range []struct {
		name    string
		resp    []string
		elapsed time.Duration
		age     int64
		fresh   bool
	}{
		{"resident time", []string{"Cache-Control: max-age=60", "Date: {0}"}, 30 * time.Second, 30, true},
		{"Age counts", []string{"Cache-Control: max-age=60", "Date: {0}", "Age: 30"}, 20 * time.Second, 50, true},
		{"Age beyond max-age", []string{"Cache-Control: max-age=10", "Date: {0}", "Age: 15"}, 0, 15, false},
		{"Date slow: apparent age", []string{"Expires: {10}", "Date: {-10}", "Age: 25"}, 0, 25, false},
		{"Date fast: Age wins", []string{"Expires: {20}", "Date: {10}", "Age: 15"}, 0, 15, false},
		{"Date in the past", []string{"Cache-Control: max-age=60", "Date: {-10}"}, 0, 10, true},
		{"invalid Age ignored", []string{"Cache-Control: max-age=60", "Date: {0}", "Age: abc"}, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testCache(t)
			r := request(t, "GET", url)
			if !keep(t, c, r, response(t, "200 OK", tc.resp...), "x") {
				t.Fatal("not stored")
			}
			now := t0.Add(tc.elapsed)
			o, v := c.Lookup(r, now)
			if o == nil {
				t.Fatal("lookup found nothing")
			}
			if got := o.Age(now); got != tc.age {
				t.Errorf("Age = %d, want %d", got, tc.age)
			}
			if (v == Hit) != tc.fresh {
				t.Errorf("verdict = %v, want fresh %v", v, tc.fresh)
			}
		})
	}
}

// 5.2.1: request directives.
func TestRequestDirectives(t *testing.T) {
	for _, tc := range []struct {
		req     []string
		elapsed time.Duration
		want    Verdict
	}{
		{nil, 0, Hit},
		{[]string{"Cache-Control: nothing-to-see-here", "Pragma: foo"}, 0, Hit},
		{[]string{"Cache-Control: no-cache"}, 0, Stale},
		{[]string{"Pragma: no-cache"}, 0, Stale},
		{[]string{"Pragma: no-cache", "Cache-Control: max-stale"}, 0, Hit},
		{[]string{"Cache-Control: max-age=10"}, 20 * time.Second, Stale},
		{[]string{"Cache-Control: min-fresh=50"}, 20 * time.Second, Stale},
		{[]string{"Cache-Control: max-stale=100"}, 120 * time.Second, Hit},
		{[]string{"Cache-Control: max-stale=10"}, 120 * time.Second, Stale},
		{[]string{"Cache-Control: max-stale"}, time.Hour, Hit},
	} {
		t.Run(strings.Join(tc.req, " | "), func(t *testing.T) {
			c := testCache(t)
			if !keep(t, c, request(t, "GET", url), response(t, "200 OK", "Cache-Control: max-age=60", "Date: {0}"), "x") {
				t.Fatal("not stored")
			}
			if _, v := c.Lookup(request(t, "GET", url, tc.req...), t0.Add(tc.elapsed)); v != tc.want {
				t.Fatalf("verdict = %v, want %v", v, tc.want)
			}
		})
	}
}

// 5.2.2: response directives that govern reuse.
func TestResponseDirectivesOnReuse(t *testing.T) {
	for _, tc := range []struct {
		resp      string
		elapsed   time.Duration
		req       []string
		want      Verdict
		deadStale bool // may answer when the next hops are dead
	}{
		{"Cache-Control: max-age=60, no-cache", 0, nil, Stale, false},
		{`Cache-Control: max-age=60, no-cache="Set-Cookie"`, 0, nil, Hit, true},
		{"Cache-Control: max-age=60, must-revalidate", 0, nil, Hit, false},
		{"Cache-Control: max-age=60, must-revalidate", 120 * time.Second, []string{"Cache-Control: max-stale"}, Stale, false},
		{"Cache-Control: max-age=60, proxy-revalidate", 120 * time.Second, []string{"Cache-Control: max-stale"}, Stale, false},
		{"Cache-Control: s-maxage=60", 120 * time.Second, []string{"Cache-Control: max-stale"}, Stale, false},
		{"Cache-Control: max-age=60", 120 * time.Second, nil, Stale, true},
	} {
		t.Run(tc.resp, func(t *testing.T) {
			c := testCache(t)
			if !keep(t, c, request(t, "GET", url), response(t, "200 OK", tc.resp, "Date: {0}", `ETag: "x"`), "x") {
				t.Fatal("not stored")
			}
			now := t0.Add(tc.elapsed)
			o, v := c.Lookup(request(t, "GET", url, tc.req...), now)
			if v != tc.want {
				t.Fatalf("verdict = %v, want %v", v, tc.want)
			}
			if got := o.MayServeStale(now.Add(time.Hour), 24*time.Hour); got != tc.deadStale {
				t.Fatalf("MayServeStale = %v, want %v", got, tc.deadStale)
			}
		})
	}
}

// 3.1: the fields a cache stores.
func TestStoredFields(t *testing.T) {
	c := testCache(t)
	r := request(t, "GET", url)
	resp := response(t, "200 OK", "Cache-Control: max-age=60", "Connection: a, b", "a: 1", "b: 2", "c: 3",
		"Keep-Alive: timeout=5", "Proxy-Connection: x", "TE: x", "Upgrade: x", "Proxy-Authenticate: x",
		"Proxy-Authentication-Info: x", "Set-Cookie: a=b", "set-cookie2: c=d", "Content-Encoding: x", "Age: 5", "Content-Length: 1",
		`Cache-Control: no-cache="d"`, "d: 4")
	if !keep(t, c, r, resp, "x") {
		t.Fatal("not stored")
	}
	o, _ := c.Lookup(r, t0)
	got := string(o.fields)
	for _, want := range []string{"c: 3\r\n", "Content-Encoding: x\r\n", "Date: "} {
		if !strings.Contains(got, want) {
			t.Errorf("stored fields lack %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"a: 1", "b: 2", "Connection", "Keep-Alive", "Proxy-Connection", "TE:", "Upgrade",
		"Proxy-Authenticate", "Proxy-Authentication-Info", "Age:", "Content-Length", "d: 4", "a=b", "c=d"} {
		if strings.Contains(got, not) {
			t.Errorf("stored fields keep %q:\n%s", not, got)
		}
	}
}

// 4.1: calculating cache keys with Vary.
func TestVary(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stored []string
		vary   string
		asked  []string
		match  bool
	}{
		{"match", []string{"Foo: 1"}, "Foo", []string{"Foo: 1"}, true},
		{"no match", []string{"Foo: 1"}, "Foo", []string{"Foo: 2"}, false},
		{"request omits", []string{"Foo: 1"}, "Foo", nil, false},
		{"stored omits", nil, "Foo", []string{"Foo: 1"}, false},
		{"both omit", nil, "Foo", nil, true},
		{"other fields ignored", []string{"Foo: 1", "Other: 2"}, "Foo", []string{"Foo: 1", "Other: 3"}, true},
		{"two-way", []string{"Foo: 1", "Bar: abc"}, "Foo, Bar", []string{"Bar: abc", "Foo: 1"}, true},
		{"two-way mismatch", []string{"Foo: 1", "Bar: abc"}, "Foo, Bar", []string{"Foo: 2", "Bar: abc"}, false},
		{"three-way, both omit one", []string{"Foo: 1", "Baz: 789"}, "Foo, Bar, Baz", []string{"Foo: 1", "Baz: 789"}, true},
		{"whitespace", []string{"Foo: 1,2"}, "Foo", []string{"Foo:  1, 2 "}, true},
		{"combined lines", []string{"Foo: 1, 2"}, "Foo", []string{"Foo: 1", "Foo: 2"}, true},
		{"language order", []string{"Accept-Language: en, de"}, "Accept-Language", []string{"Accept-Language: de, en"}, true},
		{"language case and space", []string{"Accept-Language: en, de"}, "Accept-Language", []string{"Accept-Language:  eN ,   De"}, true},
		{"different languages", []string{"Accept-Language: en"}, "Accept-Language", []string{"Accept-Language: fr"}, false},
		{"case of the Vary name", []string{"Foo: 1"}, "fOO", []string{"foo: 1"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testCache(t)
			if !keep(t, c, request(t, "GET", url, tc.stored...), response(t, "200 OK", "Cache-Control: max-age=60", "Vary: "+tc.vary), "x") {
				t.Fatal("not stored")
			}
			_, v := c.Lookup(request(t, "GET", url, tc.asked...), t0)
			if (v == Hit) != tc.match {
				t.Fatalf("verdict %v, want match %v", v, tc.match)
			}
			if !tc.match && v != VaryMiss {
				t.Fatalf("verdict %v, want VaryMiss", v)
			}
		})
	}
	t.Run("Content-Language picked by q", func(t *testing.T) {
		c := testCache(t)
		keep(t, c, request(t, "GET", url, "Accept-Language: en, de"),
			response(t, "200 OK", "Cache-Control: max-age=60", "Vary: Accept-Language", "Content-Language: de"), "x")
		if _, v := c.Lookup(request(t, "GET", url, "Accept-Language: fr;q=0.5, de;q=1.0"), t0); v != Hit {
			t.Fatalf("verdict %v, want a hit for the preferred language", v)
		}
		if _, v := c.Lookup(request(t, "GET", url, "Accept-Language: fr;q=1.0, de;q=0.5"), t0); v == Hit {
			t.Fatal("a request preferring fr got the de response")
		}
	})
	t.Run("variants side by side", func(t *testing.T) {
		c := testCache(t)
		keep(t, c, request(t, "GET", url, "Foo: 1"), response(t, "200 OK", "Cache-Control: max-age=60", "Vary: Foo"), "one")
		keep(t, c, request(t, "GET", url, "Foo: 2"), response(t, "200 OK", "Cache-Control: max-age=60", "Vary: Foo"), "two")
		for foo, body := range map[string]string{"1": "one", "2": "two"} {
			o, v := c.Lookup(request(t, "GET", url, "Foo: "+foo), t0)
			if v != Hit || string(o.Body) != body {
				t.Fatalf("Foo: %s: %v %q, want hit %q", foo, v, o.Body, body)
			}
		}
		if n := c.Purge([]byte(url)); n != 2 {
			t.Fatalf("purged %d variants, want 2", n)
		}
	})
}

// 4.3.4: freshening stored responses upon validation.
func TestRefreshMergesThe304(t *testing.T) {
	c := testCache(t)
	r := request(t, "GET", url)
	keep(t, c, r, response(t, "200 OK", "Cache-Control: max-age=1", "Date: {0}", `ETag: "a"`,
		"Test-Header: A", "Kept: yes", "Content-Length: 5"), "hello")
	old, v := c.Lookup(r, t0.Add(5*time.Second))
	if v != Stale {
		t.Fatalf("verdict %v, want stale", v)
	}
	later := t0.Add(5 * time.Second)
	resp := response(t, "304 Not Modified", "Cache-Control: max-age=3600", "Date: {0}", `ETag: "a"`,
		"Test-Header: B", "Content-Length: 99", "Connection: close")
	o := c.Refresh(old, r, resp, later, later)
	got := string(o.fields)
	for _, want := range []string{"Test-Header: B", "Kept: yes", "Cache-Control: max-age=3600"} {
		if !strings.Contains(got, want) {
			t.Errorf("refreshed fields lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "Test-Header: A") || strings.Contains(got, "max-age=1\r") || strings.Contains(got, "Content-Length") {
		t.Errorf("refreshed fields keep what the 304 replaced:\n%s", got)
	}
	if string(o.Body) != "hello" {
		t.Errorf("body = %q", o.Body)
	}
	if _, v := c.Lookup(r, later.Add(time.Minute)); v != Hit {
		t.Fatalf("after the 304: %v, want a hit (fresh for an hour)", v)
	}
}

// 4.3.2: handling a received validation request.
func TestClientConditionals(t *testing.T) {
	c := testCache(t)
	r := request(t, "GET", url)
	keep(t, c, r, response(t, "200 OK", "Cache-Control: max-age=600", "Date: {0}", `ETag: "abcdef"`, "Last-Modified: {-3000}"), "x")
	o, _ := c.Lookup(r, t0)
	for _, tc := range []struct {
		field string
		want  bool
	}{
		{`If-None-Match: "abcdef"`, true},
		{`If-None-Match: W/"abcdef"`, true},
		{`If-None-Match: "1234", "abcdef", "5678"`, true},
		{`If-None-Match: "1234"`, false},
		{`If-None-Match: *`, true},
		{"If-Modified-Since: {-3000}", true},
		{"If-Modified-Since: {-2000}", true},
		{"If-Modified-Since: {-5000}", false},
		{"If-Modified-Since: garbage", false},
	} {
		if got := o.NotModified(request(t, "GET", url, tc.field)); got != tc.want {
			t.Errorf("%s: 304 = %v, want %v", tc.field, got, tc.want)
		}
	}
	// No Last-Modified: the Date stands for it.
	keep(t, c, r, response(t, "200 OK", "Cache-Control: max-age=600", "Date: {-5000}"), "x")
	o, _ = c.Lookup(r, t0)
	if !o.NotModified(request(t, "GET", url, "If-Modified-Since: {-3000}")) {
		t.Error("If-Modified-Since after the Date: want 304")
	}
}

// RFC 9110 14: ranges from a stored response.
func TestRanges(t *testing.T) {
	c := testCache(t)
	r := request(t, "GET", url)
	keep(t, c, r, response(t, "200 OK", "Cache-Control: max-age=600", `ETag: "e"`), "0123456789A")
	o, _ := c.Lookup(r, t0)
	for _, tc := range []struct {
		field  string
		ok     bool
		unsat  bool
		served string
	}{
		{"Range: bytes=0-1", true, false, "01"},
		{"Range: bytes=1-", true, false, "123456789A"},
		{"Range: bytes=-1", true, false, "A"},
		{"Range: bytes=5-100", true, false, "56789A"},
		{"Range: bytes=20-", false, true, ""},
		{"Range: bytes=0-1,3-4", false, false, ""},
		{"Range: items=0-1", false, false, ""},
		{"Range: bytes=3-1", false, false, ""},
	} {
		rq := request(t, "GET", url, tc.field)
		f, l, _, ok, unsat := o.RangeFor(rq)
		if ok != tc.ok || unsat != tc.unsat {
			t.Errorf("%s: ok %v unsat %v, want %v %v", tc.field, ok, unsat, tc.ok, tc.unsat)
			continue
		}
		if ok && string(o.Slice(f, l)) != tc.served {
			t.Errorf("%s: served %q, want %q", tc.field, o.Slice(f, l), tc.served)
		}
	}
	if _, _, _, ok, _ := o.RangeFor(request(t, "GET", url, "Range: bytes=0-1", `If-Range: "other"`)); ok {
		t.Error("If-Range that does not match: want the whole response")
	}
	if _, _, _, ok, _ := o.RangeFor(request(t, "GET", url, "Range: bytes=0-1", `If-Range: "e"`)); !ok {
		t.Error("If-Range that matches: want the range")
	}

	// A stored part answers the ranges it covers, and only range requests.
	c = testCache(t)
	pr := request(t, "GET", url, "Range: bytes=-5")
	if !keep(t, c, pr, response(t, "206 Partial Content", "Cache-Control: max-age=600", "Content-Range: bytes 5-9/10", "Content-Length: 5"), "56789") {
		t.Fatal("206 not stored")
	}
	for field, want := range map[string]string{"Range: bytes=-5": "56789", "Range: bytes=6-8": "678", "Range: bytes=6-": "6789", "Range: bytes=-1": "9"} {
		o, v := c.Lookup(request(t, "GET", url, field), t0)
		if v != Hit {
			t.Errorf("%s: %v, want a hit from the stored part", field, v)
			continue
		}
		rq := request(t, "GET", url, field)
		f, l, total, ok, _ := o.RangeFor(rq)
		if !ok || total != 10 || string(o.Slice(f, l)) != want {
			t.Errorf("%s: %v %q/%d, want %q/10", field, ok, o.Slice(f, l), total, want)
		}
	}
	if _, v := c.Lookup(request(t, "GET", url), t0); v == Hit {
		t.Error("a request for the whole response was answered from a part")
	}
	if _, v := c.Lookup(request(t, "GET", url, "Range: bytes=0-1"), t0); v == Hit {
		t.Error("a range the part does not cover was a hit")
	}
}

// HEAD is answered from a stored GET (RFC 9110 9.3.2): the key is the
// same and lookup does not care for the method.
func TestHeadFromStoredGET(t *testing.T) {
	c := testCache(t)
	keep(t, c, request(t, "GET", url), response(t, "200 OK", "Cache-Control: max-age=600"), "body")
	if _, v := c.Lookup(request(t, "HEAD", url), t0); v != Hit {
		t.Fatalf("HEAD: %v, want a hit", v)
	}
	if keep(t, c, request(t, "HEAD", url), response(t, "200 OK", "Cache-Control: max-age=600"), "") {
		t.Fatal("a response to HEAD was stored as the GET response")
	}
}

// 4.4: invalidating stored responses.
func TestInvalidation(t *testing.T) {
	c := testCache(t)
	keep(t, c, request(t, "GET", url), response(t, "200 OK", "Cache-Control: max-age=600"), "x")
	c.Invalidate([]byte(url))
	if _, v := c.Lookup(request(t, "GET", url), t0); v != Miss {
		t.Fatalf("after invalidation: %v, want a miss", v)
	}
}

func TestKeys(t *testing.T) {
	for _, tc := range []struct{ scheme, host, port, path, want string }{
		{"http", "Example.COM", "", "/a?b", "http://example.com/a?b"},
		{"HTTP", "example.com", "80", "/a", "http://example.com/a"},
		{"http", "example.com", "8080", "", "http://example.com:8080/"},
		{"https", "example.com", "443", "/", "https://example.com/"},
		{"http", "::1", "3128", "/x", "http://[::1]:3128/x"},
	} {
		if got := string(AppendKey(nil, []byte(tc.scheme), []byte(tc.host), []byte(tc.port), []byte(tc.path))); got != tc.want {
			t.Errorf("key %v = %q, want %q", tc, got, tc.want)
		}
	}
}

func TestHTTPDates(t *testing.T) {
	want := time.Date(2050, 8, 18, 2, 1, 18, 0, time.UTC).Unix()
	for _, tc := range []struct {
		s  string
		ok bool
	}{
		{"Thu, 18 Aug 2050 02:01:18 GMT", true},
		{"THU, 18 AUG 2050 02:01:18 gmt", true},
		{"Thursday, 18-Aug-50 02:01:18 GMT", true},
		{"Thu Aug 18 02:01:18 2050", true},
		{"Thu, 18 Aug 2050 02:01:18 UTC", false},
		{"Thu, 18 Aug 50 02:01:18 GMT", false},
		{"Thu 18 Aug 2050 02:01:18 GMT", false},
		{"Thu, 18  Aug  2050 02:01:18 GMT", false},
		{"Thu, 18-Aug-2050 02:01:18 GMT", false},
		{"Thu, 18 Aug 2050 02.01.18 GMT", false},
		{"Thu, 18 Aug 2050 2:01:18 GMT", false},
		{"0", false},
		{"Thu, 31 Feb 2050 02:01:18 GMT", false},
	} {
		got, ok := parseHTTPDate([]byte(tc.s))
		if ok != tc.ok || (ok && got != want) {
			t.Errorf("%q: %d %v, want ok=%v", tc.s, got, ok, tc.ok)
		}
	}
}

// A 304 without Date is dated when it arrived (RFC 9110 6.6.1): the
// refreshed object is fresh for its new max-age, not judged by the old
// Date.
func TestRefreshWithoutDate(t *testing.T) {
	c := testCache(t)
	r := request(t, "GET", url)
	keep(t, c, r, response(t, "200 OK", "Cache-Control: max-age=10", "Date: {0}", `ETag: "a"`, "Content-Length: 5"), "hello")
	later := t0.Add(time.Hour)
	old, v := c.Lookup(r, later)
	if v != Stale {
		t.Fatalf("verdict %v, want stale", v)
	}
	o := c.Refresh(old, r, response(t, "304 Not Modified", "Cache-Control: max-age=600", `ETag: "a"`), later, later)
	if n := strings.Count(string(o.fields), "Date: "); n != 1 {
		t.Fatalf("%d Date fields after the refresh:\n%s", n, o.fields)
	}
	if _, v := c.Lookup(r, later.Add(time.Minute)); v != Hit {
		t.Fatalf("a minute after a 304 without Date: %v; want a hit (fresh for 600 s from when it came)", v)
	}
}

// One URL keeps at most maxVariants Vary variants, the newest.
func TestVariantsCapped(t *testing.T) {
	c := testCache(t)
	resp := func() *h1.Response { return response(t, "200 OK", "Cache-Control: max-age=600", "Vary: Foo") }
	for i := 0; i < 3*maxVariants; i++ {
		keep(t, c, request(t, "GET", url, fmt.Sprintf("Foo: %d", i)), resp(), "x")
	}
	if _, v := c.Lookup(request(t, "GET", url, fmt.Sprintf("Foo: %d", 3*maxVariants-1)), t0); v != Hit {
		t.Fatalf("the newest variant: %v; want a hit", v)
	}
	if _, v := c.Lookup(request(t, "GET", url, "Foo: 0"), t0); v == Hit {
		t.Fatal("the oldest of 192 variants is still stored")
	}
	if n := c.Stats().Objects; n != maxVariants {
		t.Fatalf("%d objects stored for one URL; want %d", n, maxVariants)
	}
}

// TestRefreshPatterns: Squid's refresh_pattern: the first pattern that
// matches the URL gives the heuristic (min without Last-Modified, percent
// of the time since it, between min and max); others keep the defaults.
func TestRefreshPatterns(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RefreshPatterns = []RefreshPattern{
		{Pattern: `(?i)\.deb$`, Min: 90 * 24 * time.Hour, Percent: 100, Max: 90 * 24 * time.Hour},
		{Pattern: `(?i)(/cgi-bin/|\?)`, Min: 0, Percent: 0, Max: 0},
		{Pattern: `/Release$`, Min: 0, Percent: 20, Max: time.Hour},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	c := New(cfg)
	for _, tc := range []struct {
		url    string
		fields []string
		want   int64
	}{
		{"http://example.com/pool/x.DEB", []string{"Date: {0}"}, 90 * 86400},                            // min, no Last-Modified
		{"http://example.com/pool/x.deb", []string{"Last-Modified: {-86400}", "Date: {0}"}, 90 * 86400}, // 100% of a day, raised to min
		{"http://example.com/search?q=1", []string{"Last-Modified: {-86400}", "Date: {0}"}, 0},          // 0%: no heuristic
		{"http://example.com/dists/Release", []string{"Last-Modified: {-86400}", "Date: {0}"}, 3600},    // 20% of a day, capped at 1h
		{"http://example.com/other", []string{"Last-Modified: {-86400}", "Date: {0}"}, 8640},            // the defaults: 10%
		{"http://example.com/other", []string{"Date: {0}"}, -1},                                         // defaults: no freshness, no validator: not stored
		{"http://example.com/pool/x.deb", []string{"Cache-Control: max-age=60", "Date: {0}"}, 60},       // explicit freshness wins
	} {
		r := request(t, "GET", tc.url)
		o, ok := c.build(r, response(t, "200 OK", tc.fields...), t0, t0)
		got := int64(-1)
		if ok {
			got = o.lifetime
		}
		if got != tc.want {
			t.Errorf("%s %v: lifetime %d (-1: not stored); want %d", tc.url, tc.fields, got, tc.want)
		}
	}
	bad := DefaultConfig()
	bad.RefreshPatterns = []RefreshPattern{{Pattern: "(", Max: time.Hour}, {Pattern: "x", Min: 2 * time.Hour, Max: time.Hour}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "refresh_patterns") {
		t.Fatalf("bad patterns: %v; want errors naming refresh_patterns", err)
	}
}
