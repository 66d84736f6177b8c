package e2e

import (
	"bufio"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// The access log and Proxy-Status agree on the next hop of every request
// in the suite: each peerd a test starts writes an access log, every
// response a test gets through peerd.client() is recorded, and when the
// test ends each response's Proxy-Status next-hop is checked against its
// access log line (DIRECT there and here, or a peer hierarchy code) and
// against the answering fake parent's X-Parent.

type exchange struct {
	method, url      string
	nextHop, xParent string
	status           int
}

// recorder holds the exchanges of every client of one peerd; each
// client has its own transport (clients are made concurrently).
type recorder struct {
	mu   sync.Mutex
	recs []exchange
}

type recordingTransport struct {
	base http.RoundTripper
	rec  *recorder
}

var nextHopRE = regexp.MustCompile(`next-hop=("?)([^;",]+)`)

func (t *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || req.Method == http.MethodConnect || req.URL.Scheme != "http" {
		return resp, err
	}
	ex := exchange{method: req.Method, url: req.URL.String(), status: resp.StatusCode}
	if via := strings.Join(resp.Header.Values("Via"), ","); !strings.Contains(via, ",") {
		// Straight from the fake parent through this peerd alone (not
		// through a sibling that stored another parent's answer).
		ex.xParent = resp.Header.Get("X-Parent")
	}
	// An answer from this peerd's cache (its X-Cache, the last, says HIT)
	// went to no next hop: a Proxy-Status member it carries was stored
	// with it (a fleet owner's, a sibling's), not this peerd's.
	xc := resp.Header.Values("X-Cache")
	hit := len(xc) > 0 && strings.HasPrefix(xc[len(xc)-1], "HIT ")
	if ps := resp.Header.Values("Proxy-Status"); len(ps) > 0 && !hit {
		last := ps[len(ps)-1]
		if i := strings.LastIndex(last, ","); i >= 0 {
			last = last[i+1:]
		}
		if m := nextHopRE.FindStringSubmatch(last); m != nil {
			ex.nextHop = m[2]
		}
	}
	t.rec.mu.Lock()
	t.rec.recs = append(t.rec.recs, ex)
	t.rec.mu.Unlock()
	return resp, nil
}

var accessLogKey = regexp.MustCompile(`access_log\s*=`)

// withSuiteAccessLog adds an access log to a config that has none and
// returns its path; "" for a config with its own (a test that manages its
// log, rotates it or reads it itself is left alone).
func withSuiteAccessLog(t testing.TB, config string) (string, string) {
	if accessLogKey.MatchString(config) {
		return config, ""
	}
	path := t.TempDir() + "/suite-access.log"
	return addAccessLog(config, path), path
}

func addAccessLog(config, path string) string {
	line := "access_log = \"" + path + "\"\n"
	if strings.Contains(config, "[log]\n") {
		return strings.Replace(config, "[log]\n", "[log]\n"+line, 1)
	}
	return config + "\n[log]\n" + line
}

// checkAgreement runs when the test's peerd has stopped (its access log
// is flushed).
func checkAgreement(t testing.TB, path string, rec *recorder) {
	rec.mu.Lock()
	recs := append([]exchange(nil), rec.recs...)
	rec.mu.Unlock()
	if len(recs) == 0 || path == "" {
		return
	}
	f, err := os.Open(path)
	if err != nil {
		t.Errorf("agreement: no access log: %v", err)
		return
	}
	defer f.Close()
	type line struct{ method, url, hier string }
	var lines []line
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 9 {
			lines = append(lines, line{method: fs[5], url: fs[6], hier: fs[8]})
		}
	}
	used := make([]bool, len(lines))
	for _, ex := range recs {
		if ex.nextHop == "" {
			continue // answered without a next hop (a hit, an error before any)
		}
		if ex.xParent != "" && ex.nextHop != "DIRECT" && ex.nextHop != ex.xParent {
			t.Errorf("agreement: %s %s: Proxy-Status next-hop=%s, but parent %s answered", ex.method, ex.url, ex.nextHop, ex.xParent)
		}
		found := false
		for i, l := range lines {
			if used[i] || l.method != ex.method || stripQuery(l.url) != stripQuery(ex.url) {
				continue
			}
			code, _, _ := strings.Cut(l.hier, "/")
			code = strings.TrimPrefix(code, "TIMEOUT_") // an ICP query timed out first
			direct := code == "HIER_DIRECT"
			if (ex.nextHop == "DIRECT") == direct && code != "HIER_NONE" {
				used[i], found = true, true
				break
			}
		}
		if !found {
			t.Errorf("agreement: %s %s (status %d): Proxy-Status next-hop=%s has no access log line that agrees", ex.method, ex.url, ex.status, ex.nextHop)
		}
	}
}

// stripQuery cuts a URL after its '?', as the access log writes it by
// default ([log] strip_query_terms).
func stripQuery(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i+1]
	}
	return u
}
