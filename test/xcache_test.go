package e2e

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestXCacheAsSquid: every answer carries Squid's X-Cache ("HIT from
// NAME" when it came from the cache) and X-Cache-Lookup ("HIT from
// NAME:PORT" when a stored response was found, even one that was then
// revalidated), the fields operators coming from Squid grep for with
// curl -I; and answers the proxy makes itself carry its Via, as Squid's
// error pages do. The same requests go through real Squid, the
// reference: both must give the same words, each naming itself as its
// Via does, and the lookup naming the port the client used.
func TestXCacheAsSquid(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/cached/") {
			w.Header().Set("Cache-Control", "max-age=600")
			// The origin ignores validators: a revalidation gets a
			// whole new 200 (Squid's TCP_REFRESH_MODIFIED).
			w.Header().Set("ETag", `"v1"`)
		}
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, strings.Repeat("x", 100))
	})
	p := startPeerd(t, directConfig)
	sq := startSquid(t, "xcache-squid", "")
	for _, px := range []struct{ name, addr string }{{"peerd", p.proxy}, {"squid", sq.addr}} {
		t.Run(px.name, func(t *testing.T) {
			cached := "http://" + origin + "/cached/" + px.name
			steps := []struct {
				what, method, target string
				header               [2]string
				xCache, lookup       string
			}{
				{"a miss not stored", "GET", "http://" + origin + "/plain/" + px.name, [2]string{}, "MISS", "MISS"},
				{"a miss stored", "GET", cached, [2]string{}, "MISS", "MISS"},
				{"a hit", "GET", cached, [2]string{}, "HIT", "HIT"},
				{"a conditional hit (304)", "GET", cached, [2]string{"If-None-Match", `"v1"`}, "HIT", "HIT"},
				{"a HEAD hit", "HEAD", cached, [2]string{}, "HIT", "HIT"},
				{"a stored response the client wants revalidated", "GET", cached, [2]string{"Cache-Control", "max-age=0"}, "MISS", "HIT"},
				{"an error the proxy makes", "GET", "http://127.0.0.1:1/refused", [2]string{}, "MISS", "MISS"},
				{"a POST", "POST", cached, [2]string{}, "MISS", "MISS"},
			}
			_, port, _ := net.SplitHostPort(px.addr)
			c := proxyClientFor(t, px.addr)
			for _, s := range steps {
				req, err := http.NewRequest(s.method, s.target, nil)
				if err != nil {
					t.Fatal(err)
				}
				if s.header[0] != "" {
					req.Header.Set(s.header[0], s.header[1])
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatalf("%s: %v", s.what, err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				vias := resp.Header.Values("Via")
				if len(vias) == 0 {
					t.Fatalf("%s: no Via", s.what)
				}
				via := strings.Fields(vias[len(vias)-1])
				name := via[len(via)-2] // "1.1 NAME (product/version)"
				// One field each: a second would be a next hop's or a
				// duplicate of the proxy's own.
				for _, f := range []struct{ field, want string }{
					{"X-Cache", s.xCache + " from " + name},
					{"X-Cache-Lookup", s.lookup + " from " + name + ":" + port},
				} {
					if got := strings.Join(resp.Header.Values(f.field), "|"); got != f.want {
						t.Errorf("%s (%d): %s %q; want %q", s.what, resp.StatusCode, f.field, got, f.want)
					}
				}
			}
		})
	}
}
