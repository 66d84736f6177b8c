package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestForwardedForAndViaAsSquid: [proxy] forwarded_for, via and
// request_header_remove do what Squid's forwarded_for, via and
// "request_header_access NAME deny all" do, so that an operator who hid
// the client's address, the proxy or the client's own fields behind Squid
// still hides them behind peerd. The same requests go through real Squid
// with the same settings, the reference: the origin must see the same
// X-Forwarded-For and Referer from both, and Via must carry the client's
// and the proxy's own entries exactly as the setting says, in requests and
// in answers.
func TestForwardedForAndViaAsSquid(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		// What the origin was told, one line: each field as it arrived
		// (every line joined), "-" when there was none.
		seen := func(name string) string {
			if v := r.Header.Values(name); len(v) > 0 {
				return strings.Join(v, ", ")
			}
			return "-"
		}
		if strings.HasPrefix(r.URL.Path, "/stored/") {
			w.Header().Set("Cache-Control", "max-age=600")
		}
		io.WriteString(w, seen("X-Forwarded-For")+"|"+seen("Via")+"|"+seen("Referer"))
	})
	const removeAll = "request_header_access Referer deny all\nrequest_header_access X-Forwarded-For deny all\nrequest_header_access Via deny all"
	for _, tc := range []struct {
		name          string
		peerd, squid  string // the setting, in each one's words
		xff, xffFresh string // what the origin sees, with the client's XFF and without one
		clientVia     bool   // the origin sees the client's Via entry
		via           bool   // the proxy's own Via entry is added to the request
		answerVia     bool   // ... and to the answer
		referer       bool   // the origin sees the client's Referer
	}{
		{"on", `forwarded_for = "on"`, "forwarded_for on", "192.0.2.7, 127.0.0.1", "127.0.0.1", true, true, true, true},
		{"off", `forwarded_for = "off"`, "forwarded_for off", "192.0.2.7, unknown", "unknown", true, true, true, true},
		{"transparent", `forwarded_for = "transparent"`, "forwarded_for transparent", "192.0.2.7", "-", true, true, true, true},
		{"delete", `forwarded_for = "delete"`, "forwarded_for delete", "-", "-", true, true, true, true},
		{"truncate", `forwarded_for = "truncate"`, "forwarded_for truncate", "127.0.0.1", "127.0.0.1", true, true, true, true},
		{"via off", "via = false", "via off", "192.0.2.7, 127.0.0.1", "127.0.0.1", true, false, false, true},
		{"fields removed", `request_header_remove = ["referer", "X-Forwarded-For", "Via"]`, removeAll, "-", "-", false, false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startPeerd(t, withProxy(directConfig, `name = "ffpeerd"`, tc.peerd))
			sq := startSquid(t, "ff-squid", tc.squid+"\n")
			for _, px := range []struct{ name, addr, self string }{{"peerd", p.proxy, "ffpeerd"}, {"squid", sq.addr, "ff-squid"}} {
				c := proxyClientFor(t, px.addr)
				for _, clientXFF := range []string{"192.0.2.7", ""} {
					req, _ := http.NewRequest("GET", "http://"+origin+"/ff/"+px.name, nil)
					req.Header.Set("Via", "1.1 client-side")
					req.Header.Set("Referer", "http://ref.test/page")
					want := tc.xffFresh
					if clientXFF != "" {
						req.Header.Set("X-Forwarded-For", clientXFF)
						want = tc.xff
					}
					resp, err := c.Do(req)
					if err != nil {
						t.Fatalf("%s: %v", px.name, err)
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					got := strings.Split(string(body), "|")
					if len(got) != 3 {
						t.Fatalf("%s: origin answered %q", px.name, body)
					}
					xff, via, referer := got[0], got[1], got[2]
					if xff != want {
						t.Errorf("%s, client XFF %q: origin saw X-Forwarded-For %q; want %q", px.name, clientXFF, xff, want)
					}
					if has := strings.Contains(via, "client-side"); has != tc.clientVia {
						t.Errorf("%s: origin saw Via %q; the client's entry there: %v, want %v", px.name, via, has, tc.clientVia)
					}
					if has := strings.Contains(via, px.self); has != tc.via {
						t.Errorf("%s: origin saw Via %q; the proxy's own entry there: %v, want %v", px.name, via, has, tc.via)
					}
					if has := referer != "-"; has != tc.referer {
						t.Errorf("%s: origin saw Referer %q; want it there: %v", px.name, referer, tc.referer)
					}
					answerVia := strings.Join(resp.Header.Values("Via"), ", ")
					if has := strings.Contains(answerVia, px.self); has != tc.answerVia {
						t.Errorf("%s: the answer's Via %q; the proxy's own entry there: %v, want %v", px.name, answerVia, has, tc.answerVia)
					}
				}
				// A hit (the second GET of a stored answer) and an error
				// the proxy makes itself carry its Via as relayed answers do.
				for _, s := range []struct{ what, url string }{
					{"a miss stored", "http://" + origin + "/stored/" + px.name},
					{"a hit", "http://" + origin + "/stored/" + px.name},
					{"an error", "http://127.0.0.1:1/refused"},
				} {
					resp, err := c.Get(s.url)
					if err != nil {
						t.Fatalf("%s, %s: %v", px.name, s.what, err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					for _, v := range resp.Header.Values("Via") {
						if strings.TrimSpace(v) == "" {
							t.Errorf("%s, %s (%d): an empty Via field", px.name, s.what, resp.StatusCode)
						}
					}
					answerVia := strings.Join(resp.Header.Values("Via"), ", ")
					if has := strings.Contains(answerVia, px.self); has != tc.answerVia {
						t.Errorf("%s, %s (%d): Via %q; the proxy's own entry there: %v, want %v", px.name, s.what, resp.StatusCode, answerVia, has, tc.answerVia)
					}
				}
			}
		})
	}
}
