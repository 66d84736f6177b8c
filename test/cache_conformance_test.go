package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A conformance table for the cache, through the binary, in the manner of
// the public HTTP cache-tests suite (github.com/http-tests/cache-tests):
// each scenario is a few requests for one URL through peerd to an origin
// that answers each with configured fields and numbers it
// (Server-Request-Count), so the client can tell a stored answer from a
// fresh one. The scenarios are ours, chosen section by section of RFC
// 9111 to cover what that suite scores.

// hv is a field; a value "{N}" is an HTTP-date N seconds from now (when
// the origin answers, or the client asks).
type hv struct{ name, value string }

type step struct {
	method  string
	req     []hv
	reqBody string
	// What the origin answers.
	status    int
	resp      []hv
	body      string
	validated string // "etag" or "lm": 304 when the request's validator matches the previous step's, else 999

	pauseAfter bool
	// What the client expects.
	expect     string // "cached", "not_cached" or ""
	wantStatus int
	want       []hv // value "" means present
	missing    []string
	wantBody   *string
	sawReq     []hv // fields the origin must have seen
}

type scenario struct {
	name  string
	steps []step
}

func str(s string) *string { return &s }

// origin numbers the requests of each scenario (by its path) and answers
// each with the step its Req-Num names.
type conformanceOrigin struct {
	mu     sync.Mutex
	counts map[string]int
	seen   map[string][]http.Header
	byPath map[string][]step
}

func relDate(v string, now time.Time) string {
	if strings.HasPrefix(v, "{") && strings.HasSuffix(v, "}") {
		if n, err := strconv.Atoi(v[1 : len(v)-1]); err == nil {
			return now.Add(time.Duration(n) * time.Second).UTC().Format(http.TimeFormat)
		}
	}
	return v
}

func (o *conformanceOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	o.mu.Lock()
	o.counts[path]++
	n := o.counts[path]
	o.seen[path] = append(o.seen[path], r.Header.Clone())
	steps := o.byPath[path]
	o.mu.Unlock()
	num, _ := strconv.Atoi(r.Header.Get("Req-Num"))
	if num < 1 || num > len(steps) {
		http.Error(w, "no such step", http.StatusConflict)
		return
	}
	s := steps[num-1]
	io.Copy(io.Discard, r.Body)
	now := time.Now()
	status := s.status
	if status == 0 {
		status = 200
	}
	if s.validated != "" {
		prev := steps[num-2]
		status = 999
		for _, f := range prev.resp {
			v := relDate(f.value, now)
			if (s.validated == "etag" && strings.EqualFold(f.name, "ETag") && r.Header.Get("If-None-Match") == v) ||
				(s.validated == "lm" && strings.EqualFold(f.name, "Last-Modified") && r.Header.Get("If-Modified-Since") == v) {
				status = 304
			}
		}
	}
	h := w.Header()
	h.Set("Server-Request-Count", strconv.Itoa(n))
	for _, f := range s.resp {
		h[http.CanonicalHeaderKey(f.name)] = append(h[http.CanonicalHeaderKey(f.name)], relDate(f.value, now))
	}
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", "text/plain")
	}
	body := s.body
	if body == "" {
		body = path
	}
	if status == 304 || status == 204 {
		w.WriteHeader(status)
		return
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		io.WriteString(w, body)
	}
}

func runScenario(t *testing.T, client *http.Client, base string, o *conformanceOrigin, sc scenario) {
	path := "/" + strings.NewReplacer(" ", "-", "/", "-", "`", "", "\"", "").Replace(sc.name)
	o.mu.Lock()
	o.byPath[path] = sc.steps
	o.mu.Unlock()
	for i, s := range sc.steps {
		num := i + 1
		method := s.method
		if method == "" {
			method = http.MethodGet
		}
		var body io.Reader
		if s.reqBody != "" {
			body = strings.NewReader(s.reqBody)
		}
		req, _ := http.NewRequest(method, base+path, body)
		req.Header.Set("Pragma", "foo")
		req.Header.Set("Cache-Control", "nothing-to-see-here")
		for _, f := range s.req {
			req.Header[http.CanonicalHeaderKey(f.name)] = append(req.Header[http.CanonicalHeaderKey(f.name)], relDate(f.value, time.Now()))
		}
		req.Header.Set("Req-Num", strconv.Itoa(num))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", num, err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		count, _ := strconv.Atoi(resp.Header.Get("Server-Request-Count"))
		switch s.expect {
		case "cached":
			if !(count < num || (resp.StatusCode == 304 && count == 0)) {
				t.Errorf("request %d was not answered from the cache (origin count %d; Cache-Status %q)", num, count, resp.Header.Get("Cache-Status"))
			}
		case "not_cached":
			if count != num {
				t.Errorf("request %d was answered from the cache (origin count %d; Cache-Status %q)", num, count, resp.Header.Get("Cache-Status"))
			}
		}
		want := s.wantStatus
		if want == 0 {
			want = s.status
			if want == 0 || s.validated != "" {
				want = 200
			}
		}
		if resp.StatusCode != want {
			t.Errorf("request %d: status %d, want %d (%s: %s)", num, resp.StatusCode, want, resp.Header.Get("X-Peerd-Error"), got)
		}
		for _, f := range s.want {
			v, ok := resp.Header[http.CanonicalHeaderKey(f.name)]
			switch {
			case !ok:
				t.Errorf("request %d: no %s field", num, f.name)
			case f.value != "" && strings.Join(v, ", ") != f.value:
				t.Errorf("request %d: %s is %q, want %q", num, f.name, strings.Join(v, ", "), f.value)
			}
		}
		for _, name := range s.missing {
			if v := resp.Header.Values(name); len(v) > 0 {
				t.Errorf("request %d: unexpected %s: %q", num, name, v)
			}
		}
		if s.wantBody != nil && string(got) != *s.wantBody {
			t.Errorf("request %d: body %q, want %q", num, got, *s.wantBody)
		}
		if s.sawReq != nil {
			o.mu.Lock()
			seen := o.seen[path]
			o.mu.Unlock()
			if len(seen) == 0 {
				t.Errorf("request %d: the origin saw nothing", num)
			} else {
				last := seen[len(seen)-1]
				for _, f := range s.sawReq {
					if v := last.Get(f.name); (f.value == "" && v == "") || (f.value != "" && v != f.value) {
						t.Errorf("request %d: the origin saw %s %q, want %q", num, f.name, v, f.value)
					}
				}
			}
		}
		if s.pauseAfter {
			time.Sleep(2200 * time.Millisecond)
		}
	}
}

// TestCacheConformance runs the scenarios against the memory cache and
// against a disk store whose memory tier keeps no body (every body of a
// byte or more is read from disk): the disk must score as well.
func TestCacheConformance(t *testing.T) {
	t.Parallel()
	t.Run("memory", func(t *testing.T) { conformance(t, directConfig) })
	t.Run("disk", func(t *testing.T) {
		conformance(t, directConfig+fmt.Sprintf("[cache]\ndisk = %q\nmax_object_in_memory = \"1B\"\n", t.TempDir()))
	})
}

func conformance(t *testing.T, config string) {
	o := &conformanceOrigin{counts: map[string]int{}, seen: map[string][]http.Header{}, byPath: map[string][]step{}}
	origin := newOrigin(t, o.ServeHTTP)
	p := startPeerd(t, config)
	u, _ := url.Parse("http://" + p.proxy)
	client := &http.Client{
		Transport:     &http.Transport{Proxy: http.ProxyURL(u), DisableCompression: true, MaxIdleConnsPerHost: 64},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       20 * time.Second,
	}
	base := "http://" + origin
	scs := conformanceScenarios()
	var passed atomic.Int64
	t.Run("scenarios", func(t *testing.T) {
		for _, sc := range scs {
			t.Run(sc.name, func(t *testing.T) {
				t.Parallel()
				t.Cleanup(func() {
					if !t.Failed() {
						passed.Add(1)
					}
				})
				runScenario(t, client, base, o, sc)
			})
		}
	})
	// The score, as cache-tests would print it (every scenario is
	// required here, so anything under 100% fails above too).
	t.Logf("cache conformance through the binary: %d/%d scenarios pass", passed.Load(), len(scs))
}

// reuse is a scenario of two requests: the first answered with resp,
// the second expected cached or not.
func reuse(name string, pause bool, expect string, resp ...hv) scenario {
	return scenario{name, []step{{resp: resp, pauseAfter: pause}, {expect: expect}}}
}

func conformanceScenarios() []scenario {
	cc := func(v string) hv { return hv{"Cache-Control", v} }
	date := hv{"Date", "{0}"}
	fresh := []hv{{"Expires", "{100000}"}, cc("max-age=100000"), {"Last-Modified", "{0}"}, date}
	stale := []hv{{"Expires", "{-5000}"}, {"Last-Modified", "{-100000}"}, date}
	sc := []scenario{
		// 4.2.1 freshness lifetime, and Cache-Control parsing.
		reuse("no freshness", true, "not_cached"),
		reuse("max-age", true, "cached", cc("max-age=3600")),
		reuse("max-age quoted", true, "cached", cc(`max-age="3600"`)),
		reuse("max-age single-quoted", true, "not_cached", cc("max-age='3600'")),
		reuse("max-age in a quoted string", true, "not_cached", cc(`extension="max-age=100", max-age=1`)),
		reuse("max-age in a quoted string after", true, "not_cached", cc(`max-age=1, extension="max-age=100"`)),
		reuse("max-age space before =", true, "not_cached", cc("max-age =100")),
		reuse("max-age space after =", true, "not_cached", cc("max-age= 100")),
		reuse("max-age=0", true, "not_cached", cc("max-age=0")),
		reuse("max-age leading alpha", true, "not_cached", cc("max-age=a100")),
		reuse("max-age trailing alpha", true, "not_cached", cc("max-age=100a")),
		reuse("max-age negative", true, "not_cached", cc("max-age=-100")),
		reuse("max-age 2147483648", true, "cached", cc("max-age=2147483648")),
		reuse("max-age 99999999999", true, "cached", cc("max-age=99999999999")),
		reuse("max-age leading zeros", true, "cached", cc("max-age=003600")),
		reuse("Age beyond max-age", true, "not_cached", date, cc("max-age=10"), hv{"Age", "15"}),
		reuse("max-age and past Expires", true, "cached", cc("max-age=3600"), hv{"Expires", "{-10000}"}, date),
		reuse("max-age and invalid Expires", true, "cached", cc("max-age=3600"), hv{"Expires", "0"}, date),
		reuse("max-age=0 and future Expires", true, "not_cached", hv{"Expires", "{10000}"}, cc("max-age=0"), date),
		reuse("max-age with an extension", true, "cached", cc("foobar, max-age=3600")),
		reuse("MaX-AgE", true, "cached", cc("MaX-aGe=3600")),
		reuse("s-maxage", true, "cached", cc("s-maxage=3600")),
		reuse("s-maxage over longer max-age", true, "not_cached", cc("max-age=3600, s-maxage=1")),
		reuse("s-maxage over longer max-age reversed", true, "not_cached", cc("s-maxage=1, max-age=3600")),
		reuse("s-maxage over longer max-age two lines", true, "not_cached", cc("max-age=3600"), cc("s-maxage=1")),
		reuse("s-maxage over shorter max-age", true, "cached", cc("max-age=1, s-maxage=3600")),
		// Expires.
		reuse("future Expires", true, "cached", hv{"Expires", "{2592000}"}, date),
		reuse("past Expires", true, "not_cached", hv{"Expires", "{-2592000}"}, date),
		reuse("present Expires", false, "not_cached", hv{"Expires", "{0}"}, date),
		reuse("Expires older than Date", true, "not_cached", hv{"Expires", "{300}"}, hv{"Date", "{400}"}),
		reuse("Expires weekday case", true, "cached", hv{"Expires", "THU, 18 Aug 2050 02:01:18 GMT"}, date),
		reuse("Expires month case", true, "cached", hv{"Expires", "Thu, 18 AUG 2050 02:01:18 GMT"}, date),
		reuse("Expires 0", true, "not_cached", hv{"Expires", "0"}, date),
		reuse("Expires UTC", true, "not_cached", hv{"Expires", "Thu, 18 Aug 2050 02:01:18 UTC"}, date),
		reuse("Expires two-digit year", true, "not_cached", hv{"Expires", "Thu, 18 Aug 50 02:01:18 GMT"}, date),
		reuse("Expires no comma", true, "not_cached", hv{"Expires", "Thu 18 Aug 2050 02:01:18 GMT"}, date),
		reuse("Expires date dashes", false, "not_cached", hv{"Expires", "Thu, 18-Aug-2050 02:01:18 GMT"}, date),
		reuse("Expires with an invalid Date", false, "cached", hv{"Date", "foo"}, hv{"Expires", "{10}"}),
		reuse("Age beyond Expires, slow Date", false, "not_cached", hv{"Date", "{-10}"}, hv{"Expires", "{10}"}, hv{"Age", "25"}),
		reuse("Age beyond Expires, fast Date", false, "not_cached", hv{"Date", "{10}"}, hv{"Expires", "{20}"}, hv{"Age", "15"}),
		// 5.2.2 response directives.
		reuse("private", false, "not_cached", cc("private, max-age=3600")),
		reuse("no-store", false, "not_cached", cc("no-store")),
		reuse("No-StOrE", false, "not_cached", cc("No-StOrE")),
		reuse("no-store with max-age and Expires", false, "not_cached", cc("max-age=10000, no-store"), hv{"Expires", "{10000}"}, date),
		reuse("no-cache", false, "not_cached", cc("max-age=10000, no-cache"), hv{"Expires", "{10000}"}, date),
		{"no-cache revalidates", []step{{resp: []hv{cc("no-cache"), {"ETag", `"abcd"`}}}, {validated: "etag", sawReq: []hv{{"If-None-Match", `"abcd"`}}}}},
		{"must-revalidate stale", []step{
			{resp: []hv{cc("max-age=2, must-revalidate"), {"ETag", `"abcd"`}}},
			{expect: "cached", pauseAfter: true, resp: []hv{cc("max-age=2, must-revalidate"), {"ETag", `"abcd"`}}},
			{validated: "etag", sawReq: []hv{{"If-None-Match", `"abcd"`}}},
		}},
		reuse("must-revalidate fresh", false, "cached", cc("max-age=10000, must-revalidate"), hv{"ETag", `"abcd"`}),
		// 4.2.2 heuristic freshness.
		{"heuristic 200", []step{{resp: []hv{{"Last-Modified", "{-86400}"}, date}}, {expect: "cached"}}},
		{"heuristic 404", []step{{status: 404, resp: []hv{{"Last-Modified", "{-86400}"}, date}}, {status: 404, expect: "cached"}}},
		{"heuristic 204", []step{{status: 204, resp: []hv{{"Last-Modified", "{-86400}"}, date}}, {status: 204, expect: "cached"}}},
		{"no heuristic 201", []step{{status: 201, resp: []hv{{"Last-Modified", "{-86400}"}, date}}, {status: 201, expect: "not_cached"}}},
		{"no heuristic 503", []step{{status: 503, resp: []hv{{"Last-Modified", "{-86400}"}, date}}, {status: 503, expect: "not_cached"}}},
		{"no heuristic 599", []step{{status: 599, resp: []hv{{"Last-Modified", "{-86400}"}, date}}, {status: 599, expect: "not_cached"}}},
		// Challenges are never stored, even with explicit freshness (as
		// Squid): a stored 401 or 407 would answer requests that carry
		// the credentials it asked for.
		{"401 with max-age not stored", []step{{status: 401, resp: []hv{cc("max-age=3600"), {"WWW-Authenticate", `Basic realm="o"`}, date}}, {status: 401, expect: "not_cached"}}},
		{"407 with max-age not stored", []step{{status: 407, resp: []hv{cc("max-age=3600"), {"Proxy-Authenticate", `Basic realm="o"`}, date}}, {status: 407, expect: "not_cached"}}},
		{"heuristic 599 public", []step{{status: 599, resp: []hv{{"Last-Modified", "{-86400}"}, date, cc("public")}}, {status: 599, expect: "cached"}}},
		// 4.1 Vary.
		{"vary match", []step{{req: []hv{{"Foo", "1"}}, resp: []hv{cc("max-age=5000"), {"Vary", "Foo"}}}, {req: []hv{{"Foo", "1"}}, expect: "cached"}}},
		{"vary no match", []step{{req: []hv{{"Foo", "1"}}, resp: []hv{cc("max-age=5000"), {"Vary", "Foo"}}}, {req: []hv{{"Foo", "2"}}, expect: "not_cached"}}},
		{"vary omit", []step{{req: []hv{{"Foo", "1"}}, resp: []hv{cc("max-age=5000"), {"Vary", "Foo"}}}, {expect: "not_cached"}}},
		{"vary omit stored", []step{{resp: []hv{cc("max-age=5000"), {"Vary", "Foo"}}}, {req: []hv{{"Foo", "1"}}, expect: "not_cached"}}},
		{"vary two variants", []step{
			{req: []hv{{"Foo", "1"}}, resp: []hv{cc("max-age=5000"), {"Vary", "Foo"}}, body: "foo_1"},
			{req: []hv{{"Foo", "2"}}, resp: []hv{cc("max-age=5000"), {"Vary", "Foo"}}, body: "foo_2", expect: "not_cached"},
			{req: []hv{{"Foo", "1"}}, expect: "cached", wantBody: str("foo_1")},
		}},
		{"vary star", []step{{req: []hv{{"Foo", "1"}}, resp: []hv{cc("max-age=5000"), {"Vary", "*"}}}, {req: []hv{{"Foo", "1"}}, expect: "not_cached"}}},
		{"vary three-way order", []step{
			{req: []hv{{"Foo", "1"}, {"Bar", "abc"}, {"Baz", "789"}}, resp: []hv{cc("max-age=5000"), {"Vary", "Foo, Bar, Baz"}}},
			{req: []hv{{"Foo", "1"}, {"Baz", "789"}, {"Bar", "abcde"}}, expect: "not_cached"},
		}},
		{"vary combine", []step{{req: []hv{{"Foo", "1, 2"}}, resp: []hv{cc("max-age=5000"), {"Vary", "Foo"}}}, {req: []hv{{"Foo", "1"}, {"Foo", "2"}}, expect: "cached"}}},
		{"vary language order", []step{{req: []hv{{"Accept-Language", "en, de"}}, resp: []hv{cc("max-age=5000"), {"Vary", "Accept-Language"}}}, {req: []hv{{"Accept-Language", "de, en"}}, expect: "cached"}}},
		// 3.1 storing header fields; 4.3.4 304 updates.
		{"Connection-listed fields not stored", []step{
			{resp: append(append([]hv{}, fresh...), hv{"Connection", "a, b"}, hv{"a", "1"}, hv{"b", "2"}, hv{"c", "3"})},
			{expect: "cached", want: []hv{{"c", "3"}}, missing: []string{"a", "b"}},
		}},
		// Set-Cookie is one client's: stored without it (Squid strips it
		// too), so cache-tests' optional "Set-Cookie stored" is given up.
		{"Set-Cookie not replayed", []step{{resp: []hv{date, {"Set-Cookie", "a=b"}, cc("max-age=3600")}, pauseAfter: true}, {expect: "cached", missing: []string{"Set-Cookie"}}}},
		{"Set-Cookie heuristic not stored", []step{{resp: []hv{date, {"Set-Cookie", "a=b"}, {"Last-Modified", "{-86400}"}}}, {expect: "not_cached"}}},
		{"Content-Encoding stored", []step{{resp: []hv{date, {"Content-Encoding", "x"}, cc("max-age=3600")}}, {expect: "cached", want: []hv{{"Content-Encoding", "x"}}}}},
		{"Upgrade not stored", []step{{resp: []hv{date, {"Upgrade", "x"}, cc("max-age=3600")}}, {expect: "cached", missing: []string{"Upgrade"}}}},
		{"304 keeps stored fields", []step{
			{resp: []hv{cc("max-age=2"), {"Last-Modified", "Wed, 01 Jan 2020 00:00:00 GMT"}, date, {"Test-Header", "A"}}, pauseAfter: true},
			{resp: []hv{{"Last-Modified", "Wed, 01 Jan 2020 00:00:00 GMT"}, date}, validated: "lm", want: []hv{{"Test-Header", "A"}}},
		}},
		{"304 updates fields", []step{
			{resp: []hv{date, {"Test-Header", "A"}, cc("max-age=2"), {"ETag", `"e1"`}}, pauseAfter: true},
			{resp: []hv{date, {"Test-Header", "B"}, cc("max-age=2"), {"ETag", `"e1"`}}, validated: "etag", want: []hv{{"Test-Header", "B"}}},
			{expect: "cached", want: []hv{{"Test-Header", "B"}}},
		}},
		{"304 updates Cache-Control", []step{
			{resp: []hv{date, cc("max-age=1"), {"ETag", `"e1"`}}, pauseAfter: true},
			{resp: []hv{date, cc("max-age=3600"), {"ETag", `"e1"`}}, validated: "etag"},
			{expect: "cached", want: []hv{{"Cache-Control", "max-age=3600"}}},
		}},
		// 4.4 invalidation.
		{"POST invalidates", []step{{resp: fresh}, {method: "POST", reqBody: "abc"}, {expect: "not_cached"}}},
		{"PUT invalidates", []step{{resp: fresh}, {method: "PUT", reqBody: "abc"}, {expect: "not_cached"}}},
		{"DELETE invalidates", []step{{resp: fresh}, {method: "DELETE", reqBody: "abc"}, {expect: "not_cached"}}},
		{"M-SEARCH invalidates", []step{{resp: fresh}, {method: "M-SEARCH", reqBody: "abc"}, {expect: "not_cached"}}},
		{"failed POST does not invalidate", []step{{resp: fresh}, {method: "POST", reqBody: "abc", status: 500}, {expect: "cached"}}},
		// 3.5 Authorization.
		{"Authorization", []step{{req: []hv{{"Authorization", "FOO"}}, resp: []hv{{"Expires", "{2592000}"}, date}, sawReq: []hv{{"Authorization", "FOO"}}}, {expect: "not_cached"}}},
		{"Authorization public", []step{{req: []hv{{"Authorization", "FOO"}}, resp: []hv{cc("max-age=3600, public"), date}}, {expect: "cached"}}},
		{"Authorization s-maxage", []step{{req: []hv{{"Authorization", "FOO"}}, resp: []hv{cc("s-maxage=3600"), date}}, {expect: "cached"}}},
		// 4 constructing responses from caches.
		{"Age generated", []step{{resp: fresh, pauseAfter: true}, {expect: "cached", want: []hv{{"Age", ""}}}}},
		{"Date not updated", []step{{resp: []hv{{"Expires", "{2592000}"}, {"Date", "Wed, 01 Jan 2020 00:00:00 GMT"}}}, {expect: "cached", want: []hv{{"Date", "Wed, 01 Jan 2020 00:00:00 GMT"}}}}},
		{"query args differ", []step{{resp: fresh}, {expect: "cached"}}},
		{"Cookie request", []step{{resp: fresh}, {req: []hv{{"Cookie", "a=b"}}, expect: "cached"}}},
		// Client preconditions answered from the cache.
		{"If-None-Match 304", []step{{resp: []hv{{"Expires", "{100000}"}, {"ETag", `"abcdef"`}, date}}, {req: []hv{{"If-None-Match", `"abcdef"`}}, expect: "cached", wantStatus: 304, want: []hv{{"ETag", `"abcdef"`}}}}},
		{"If-None-Match weak", []step{{resp: []hv{{"Expires", "{100000}"}, {"ETag", `W/"abcdef"`}, date}}, {req: []hv{{"If-None-Match", `W/"abcdef"`}}, expect: "cached", wantStatus: 304}}},
		{"If-None-Match list", []step{{resp: []hv{{"Expires", "{100000}"}, {"ETag", `"abcdef"`}, date}}, {req: []hv{{"If-None-Match", `"1234", "abcdef", "5678"`}}, expect: "cached", wantStatus: 304}}},
		{"If-Modified-Since 304", []step{{resp: []hv{cc("max-age=100000"), {"Last-Modified", "Wed, 01 Jan 2020 00:00:00 GMT"}, date}}, {req: []hv{{"If-Modified-Since", "Wed, 01 Jan 2020 00:00:00 GMT"}}, expect: "cached", wantStatus: 304}}},
		{"If-None-Match generated", []step{{resp: []hv{{"Expires", "{1}"}, {"ETag", `"abcdef"`}, date}, pauseAfter: true}, {validated: "etag", sawReq: []hv{{"If-None-Match", `"abcdef"`}}}}},
		// RFC 9110 14 ranges.
		{"range from a whole response", []step{{resp: []hv{cc("max-age=3600")}, body: "01234567890"}, {req: []hv{{"Range", "bytes=0-1"}}, expect: "cached", wantStatus: 206, wantBody: str("01")}}},
		{"open range", []step{{resp: []hv{cc("max-age=3600")}, body: "01234567890"}, {req: []hv{{"Range", "bytes=1-"}}, expect: "cached", wantStatus: 206, wantBody: str("1234567890")}}},
		{"suffix range", []step{{resp: []hv{cc("max-age=3600")}, body: "0123456789A"}, {req: []hv{{"Range", "bytes=-1"}}, expect: "cached", wantStatus: 206, wantBody: str("A")}}},
		{"range keeps stored fields", []step{{resp: []hv{cc("max-age=3600"), {"A", "1"}}, body: "01234567890"}, {req: []hv{{"Range", "bytes=0-1"}}, expect: "cached", wantStatus: 206, want: []hv{{"A", "1"}}}}},
		// Stale answers (RFC 5861).
		{"stale-while-revalidate", []step{
			{resp: []hv{cc("max-age=0, stale-while-revalidate=3600"), {"ETag", `"abc"`}}},
			{resp: []hv{cc("max-age=3600"), {"ETag", `"def"`}}, want: []hv{{"ETag", `"abc"`}}, pauseAfter: true},
			{expect: "cached", want: []hv{{"ETag", `"def"`}}},
		}},
		{"stale-if-error expired", []step{{resp: []hv{cc("max-age=0, stale-if-error=1")}, pauseAfter: true}, {status: 500}}},
	}
	// Status codes with explicit freshness are stored; stale ones are not
	// reused.
	for _, code := range []int{200, 203, 204, 299, 301, 302, 303, 307, 308, 400, 404, 410, 499, 500, 502, 503, 504, 599} {
		sc = append(sc,
			scenario{fmt.Sprintf("status %d fresh", code), []step{{status: code, resp: fresh}, {status: code, expect: "cached"}}},
			scenario{fmt.Sprintf("status %d stale", code), []step{{status: code, resp: stale}, {status: code, expect: "not_cached"}}})
	}
	return sc
}
