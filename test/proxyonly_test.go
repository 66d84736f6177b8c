package e2e

import (
	"io"
	"strings"
	"testing"
)

// TestProxyOnlyPeerIsNotStored: answers from a peer with proxy_only (Squid
// cache_peer proxy-only) reach the client but are never stored, so the
// next request for the URL goes to the peer again; the same answers from
// a peer without it are stored and the next request is a hit.
func TestProxyOnlyPeerIsNotStored(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		extra     string
		fetches   int    // GETs the peer sees for two client requests
		secondHit string // X-Cache of the second answer
	}{
		{"proxy_only = true", 2, "MISS"},
		{"", 1, "HIT"},
	} {
		name := tc.extra
		if name == "" {
			name = "stored"
		}
		t.Run(name, func(t *testing.T) {
			parent := cacheableParent(t, "po")
			p := startPeerd(t, baseConfig+peerBlock(tc.extra, parent))
			if got := p.peer("po").ProxyOnly; got != (tc.extra != "") {
				t.Fatalf("/peers/po proxy_only = %v", got)
			}
			var status []string
			for range 2 {
				resp, err := p.client().Get("http://o.test/po")
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || !strings.Contains(string(body), "from po") {
					t.Fatalf("%d %q; want the peer's 200", resp.StatusCode, body)
				}
				status = append(status, resp.Header.Get("Cache-Status")+" / "+resp.Header.Get("X-Cache"))
			}
			if n := parent.requests("GET"); n != tc.fetches {
				t.Errorf("the peer got %d GETs for two requests; want %d (answers: %q)", n, tc.fetches, status)
			}
			if !strings.Contains(status[1], " / "+tc.secondHit+" from ") {
				t.Errorf("second answer %q; want X-Cache %s", status[1], tc.secondHit)
			}
			if tc.extra != "" && strings.Contains(status[0], "stored") {
				t.Errorf("first answer %q says stored", status[0])
			}
		})
	}
}
