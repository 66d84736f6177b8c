package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAccessLogBytesAsSquid: the bytes field of the access log is what
// the client got, as Squid counts it (%<st): status line, header fields
// and body, with chunk framing; for a tunnel, the "200 Connection
// established" and what the far side sent. Log analysers that add the
// field up for bandwidth (SARG, Calamaris) then read a peerd log as
// they read a Squid one. The hierarchy code of a direct fetch is
// HIER_DIRECT, as Squid has written it since 3.1, and URLs are logged
// without their query (strip_query_terms). The same requests go through real Squid, and
// the same property is checked on its log: it is the reference.
func TestAccessLogBytesAsSquid(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		switch strings.SplitN(r.URL.Path, "/", 3)[1] {
		case "chunked":
			w.Header().Set("Content-Type", "text/plain")
			for i := 0; i < 3; i++ {
				io.WriteString(w, strings.Repeat("c", 700))
				w.(http.Flusher).Flush()
			}
		case "cached":
			w.Header().Set("Cache-Control", "max-age=600")
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, strings.Repeat("h", 1500))
		default:
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, strings.Repeat("x", 333))
		}
	})
	greeting := strings.Repeat("g", 177)
	far := greeter(t, greeting)

	p := startPeerd(t, directConfig)
	sq := startSquid(t, "bytes-squid", "")
	for _, px := range []struct {
		name, addr string
		log        func(n int) []string
	}{
		{"peerd", p.proxy, func(n int) []string { return accessLines(t, p.accessLog, n) }},
		{"squid", sq.addr, func(int) []string { return sq.flushed() }},
	} {
		t.Run(px.name, func(t *testing.T) {
			tag := px.name
			reqs := []struct {
				method, target string
				hier           string // the hierarchy code logged
				logged         string // the URL logged, when not the target
			}{
				{"GET", "http://" + origin + "/plain/" + tag, "HIER_DIRECT/127.0.0.1", ""},
				{"HEAD", "http://" + origin + "/plain/" + tag, "HIER_DIRECT/127.0.0.1", ""},
				{"GET", "http://" + origin + "/chunked/" + tag, "HIER_DIRECT/127.0.0.1", ""},
				{"GET", "http://" + origin + "/cached/" + tag, "HIER_DIRECT/127.0.0.1", ""},
				{"GET", "http://" + origin + "/cached/" + tag, "HIER_NONE/-", ""}, // a hit
				{"GET", "http://127.0.0.1:1/refused/" + tag, "", ""},              // an error the proxy makes
				{"CONNECT", far, "HIER_DIRECT/127.0.0.1", ""},
				// strip_query_terms, on by default in both: the query
				// (here a token) is not logged.
				{"GET", "http://" + origin + "/query/" + tag + "?token=s3cret", "HIER_DIRECT/127.0.0.1", "http://" + origin + "/query/" + tag + "?"},
			}
			got := make([]int, len(reqs))
			for i, r := range reqs {
				got[i] = bytesReceived(t, px.addr, r.method, r.target)
			}
			lines := px.log(len(reqs))
			seen := map[string]int{}
			for i, r := range reqs {
				url := r.target
				if r.logged != "" {
					url = r.logged
				}
				key := r.method + " " + url
				line := nthLine(lines, " "+key+" ", seen[key])
				seen[key]++
				if line == "" {
					t.Fatalf("no access log line for %s (%d of it):\n%s", key, seen[key], strings.Join(lines, "\n"))
				}
				f := strings.Fields(line)
				logged, err := strconv.Atoi(f[4])
				if err != nil {
					t.Fatalf("bytes field of %q: %v", line, err)
				}
				if logged != got[i] {
					t.Errorf("%s %s: logged %d bytes; the client got %d (%q)", px.name, key, logged, got[i], line)
				}
				if r.hier != "" && f[8] != r.hier {
					t.Errorf("%s %s: hierarchy %q; want %q, as Squid writes it (%q)", px.name, key, f[8], r.hier, line)
				}
			}
			if all := strings.Join(lines, "\n"); strings.Contains(all, "s3cret") {
				t.Errorf("%s logged a URL's query:\n%s", px.name, all)
			}
		})
	}
}

// bytesReceived sends one request with Connection: close on a new
// connection and counts every byte that comes back until the proxy
// closes it.
func bytesReceived(t *testing.T, proxy, method, target string) int {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	host := target
	if method != "CONNECT" {
		host = strings.SplitN(strings.TrimPrefix(target, "http://"), "/", 2)[0]
	}
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", method, target, host)
	n, err := io.Copy(io.Discard, c)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, target, err)
	}
	return int(n)
}

// greeter sends greeting on every connection and closes it.
func greeter(t *testing.T, greeting string) string {
	return tcpServer(t, func(c net.Conn) { io.WriteString(c, greeting); c.Close() })
}

// nthLine returns the n-th (from 0) line containing s, or "".
func nthLine(lines []string, s string, n int) string {
	for _, l := range lines {
		if strings.Contains(l, s) {
			if n == 0 {
				return l
			}
			n--
		}
	}
	return ""
}

// TestAccessLogCombinedAsSquid: access_log_format = "combined" writes the
// line real Squid writes with its combined format for the same request
// (time and byte count aside), and a logformat string of peerd's codes
// writes what it says.
func TestAccessLogCombinedAsSquid(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	dir, err := os.MkdirTemp("", "peerd-combined-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o777)
	sq := startSquid(t, "combined", fmt.Sprintf("access_log stdio:%s/combined.log combined\n", dir))
	logPath := filepath.Join(t.TempDir(), "access.log")
	p := startPeerd(t, directConfig+fmt.Sprintf("[log]\naccess_log = %q\naccess_log_format = \"combined\"\n", logPath))
	ask := func(proxy string) {
		t.Helper()
		c, err := net.Dial("tcp", proxy)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET http://%s/page?q=1 HTTP/1.1\r\nHost: %s\r\nReferer: http://ref.test/\r\nUser-Agent: test-agent/1.0\r\nConnection: close\r\n\r\n", origin, origin)
		io.ReadAll(c)
	}
	ask(sq.addr)
	ask(p.proxy)
	norm := func(l string) string {
		l = regexp.MustCompile(`\[[^\]]+\]`).ReplaceAllString(l, "[TIME]")
		return regexp.MustCompile(`" 200 \d+ `).ReplaceAllString(l, `" 200 BYTES `)
	}
	var squidLine string
	waitFor(t, "Squid's combined line", 10*time.Second, func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "combined.log"))
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "/page?") {
				squidLine = l
			}
		}
		return squidLine != ""
	})
	peerdLine := accessLines(t, logPath, 1)[0]
	if norm(peerdLine) != norm(squidLine) {
		t.Fatalf("combined lines differ:\nSquid: %s\npeerd: %s", squidLine, peerdLine)
	}
}

// TestAccessLogCustomFormat: a logformat string of peerd's codes, with
// widths and a request header.
func TestAccessLogCustomFormat(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	logPath := filepath.Join(t.TempDir(), "access.log")
	p := startPeerd(t, directConfig+fmt.Sprintf("[log]\naccess_log = %q\naccess_log_format = %q\n", logPath, `%>a %Ss/%03>Hs %<st %rm %ru %Sh/%<a "%{X-Trace}>h" %6tr`))
	req, _ := http.NewRequest("GET", "http://"+origin+"/custom", nil)
	req.Header.Set("X-Trace", "abc123")
	resp, err := p.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	line := accessLines(t, logPath, 1)[0]
	want := regexp.MustCompile(`^127\.0\.0\.1 TCP_MISS/200 \d+ GET http://` + regexp.QuoteMeta(origin) + `/custom HIER_DIRECT/127\.0\.0\.1 "abc123" +\d+$`)
	if !want.MatchString(line) {
		t.Fatalf("line %q; want %s", line, want)
	}
}
