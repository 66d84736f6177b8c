package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func originHandler(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/cacheable") {
		w.Header().Set("Cache-Control", "public, max-age=600")
		w.Header().Set("Last-Modified", time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat))
	}
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, "origin %s", r.URL.Path)
}

func TestSquidParentChain(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, originHandler)
	s1 := startSquid(t, "squid1", "")
	s2 := startSquid(t, "squid2", "")
	p := startPeerd(t, baseConfig+"[selection]\npolicy = \"round-robin\"\n"+peerBlock("", s1, s2))
	c := p.client()
	for i := 0; i < 20; i++ {
		resp, err := c.Get(fmt.Sprintf("http://%s/chain/%d", origin, i))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != fmt.Sprintf("origin /chain/%d", i) {
			t.Fatalf("status %d body %q", resp.StatusCode, body)
		}
		if via := resp.Header.Get("Via"); !strings.Contains(via, "squid") || !strings.Contains(via, "peerd") {
			t.Fatalf("Via = %q; want both squid and peerd", via)
		}
	}
	// Squid writes its access log lazily: poll for the lines.
	waitFor(t, "10 requests in each squid's access log (round-robin)", 10*time.Second, func() bool {
		return len(s1.accessLog()) == 10 && len(s2.accessLog()) == 10
	})
	if n1, n2 := len(s1.flushed()), len(s2.flushed()); n1 != 10 || n2 != 10 {
		t.Fatalf("squid access logs: %d and %d requests; want 10 each (round-robin)", n1, n2)
	}
}

// TestSquidParentKilledUnderLoad: SIGKILL one of two Squid parents while
// clients send GETs. No client sees an error; peerd marks it dead; after a
// restart it is revived by probe and receives traffic again.
func TestSquidParentKilledUnderLoad(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, originHandler)
	s1 := startSquid(t, "squid1", "")
	s2 := startSquid(t, "squid2", "")
	p := startPeerd(t, baseConfig+health(3, "200ms", "1s")+policy("round-robin")+peerBlock("", s1, s2))

	var errs, oks atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c := p.client()
			for i := 0; i < 100000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := c.Get(fmt.Sprintf("http://%s/load/%d/%d", origin, w, i))
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("status %d %s", resp.StatusCode, resp.Header.Get("X-Peerd-Error")))
					continue
				}
				oks.Add(1)
				time.Sleep(2 * time.Millisecond)
			}
		}(w)
	}
	defer func() { close(stop); wg.Wait() }()
	waitFor(t, "load flowing", 10*time.Second, func() bool { return oks.Load() > 50 })
	s1.kill()
	waitFor(t, "squid1 dead", 10*time.Second, func() bool { return p.peer("squid1").State == "dead" })
	atDeath := oks.Load()
	waitFor(t, "50 more requests after the death", 10*time.Second, func() bool { return oks.Load() >= atDeath+50 })
	if n := errs.Load(); n != 0 {
		t.Fatalf("%d client errors while a parent died (first: %v)", n, firstErr.Load())
	}
	before := len(s1.accessLog())
	s1.start()
	waitFor(t, "squid1 revived", 10*time.Second, func() bool { return p.peer("squid1").State == "alive" })
	waitFor(t, "squid1 gets traffic", 10*time.Second, func() bool { return len(s1.accessLog()) > before })
	if n := errs.Load(); n != 0 {
		t.Fatalf("%d client errors around revival (first: %v)", n, firstErr.Load())
	}
	st := p.peer("squid1")
	if st.DeathsTotal != 1 || st.RevivalsTotal != 1 {
		t.Fatalf("squid1 = %+v; want one death and one revival", st)
	}
}

func TestSquidConnectTunnel(t *testing.T) {
	t.Parallel()
	requireSquid(t)
	tlsOrigin := httptest.NewTLSServer(http.HandlerFunc(originHandler))
	defer tlsOrigin.Close()
	s1 := startSquid(t, "squid1", "")
	p := startPeerd(t, baseConfig+peerBlock("", s1))
	u, _ := url.Parse("http://" + p.proxy)
	c := &http.Client{Transport: &http.Transport{
		Proxy:           http.ProxyURL(u),
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}, Timeout: 10 * time.Second}
	defer c.CloseIdleConnections()
	resp, err := c.Get(tlsOrigin.URL + "/secure")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "origin /secure" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	c.CloseIdleConnections() // Squid logs a tunnel when it ends
	waitFor(t, "squid logs the CONNECT", 5*time.Second, func() bool {
		for _, l := range s1.accessLog() {
			if strings.Contains(l, "CONNECT") && strings.Contains(l, "TCP_TUNNEL/200") {
				return true
			}
		}
		return false
	})
	if st := p.peer("squid1"); st.ConnectsTotal < 2 || st.RequestsTotal != 1 {
		t.Fatalf("tunnel connect not counted: %+v", st)
	}
}

func TestSquidParentWithProxyAuth(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, originHandler)
	s1 := startAuthSquid(t)
	for _, tc := range []struct {
		login string
		want  int
	}{{"alice:s3cret", 200}, {"alice:wrong", 407}} {
		t.Run(tc.login, func(t *testing.T) {
			p := startPeerd(t, baseConfig+peerBlock(fmt.Sprintf("login = %q", tc.login), s1))
			req, _ := http.NewRequest("GET", "http://"+origin+"/auth", nil)
			req.Header.Set("Proxy-Authorization", "Basic bWFsbG9yeTp4") // the client's own: never forwarded
			resp, err := p.client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d; want %d", resp.StatusCode, tc.want)
			}
			if st := p.peer("authsquid"); st.State != "alive" || st.ConnectFailuresTotal != 0 {
				t.Fatalf("an auth answer counted against the peer: %+v", st)
			}
		})
	}
}

// startAuthSquid starts a Squid that serves only alice (password s3cret),
// with Basic authentication in realm "test".
func startAuthSquid(t *testing.T) *squid {
	requireSquid(t)
	helperDir, err := os.MkdirTemp("", "peerd-auth-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(helperDir) })
	os.Chmod(helperDir, 0o755)
	helper := filepath.Join(helperDir, "auth.sh")
	os.WriteFile(helper, []byte("#!/bin/sh\nwhile read u p; do if [ \"$u\" = alice ] && [ \"$p\" = s3cret ]; then echo OK; else echo ERR; fi; done\n"), 0o755)
	return startSquid(t, "authsquid", fmt.Sprintf(`auth_param basic program %s
auth_param basic children 1
auth_param basic realm test
acl authed proxy_auth REQUIRED
http_access deny !authed`, helper))
}

// TestLoginPassRelaysTheParentsChallenge: behind a peer with login =
// "PASS" (Squid's PASS and PASSTHRU), the client's credentials are the
// parent's to check, so the parent's 407 reaches the client with its
// Proxy-Authenticate challenge, and a browser can ask its user and try
// again. Behind a peer without it, the client's credentials never reach
// the parent, so its challenge is not passed on (RFC 9110 11.7.1).
func TestLoginPassRelaysTheParentsChallenge(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, originHandler)
	s1 := startAuthSquid(t)
	for _, tc := range []struct {
		login     string
		challenge bool
	}{{"PASS", true}, {"", false}} {
		t.Run("login="+tc.login, func(t *testing.T) {
			p := startPeerd(t, baseConfig+peerBlock(fmt.Sprintf("login = %q", tc.login), s1))
			resp, err := p.client().Get("http://" + origin + "/challenge")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got := resp.Header.Get("Proxy-Authenticate")
			if resp.StatusCode != 407 || (got != "") != tc.challenge {
				t.Fatalf("%d, Proxy-Authenticate %q; want 407 with the challenge passed on: %v", resp.StatusCode, got, tc.challenge)
			}
			if tc.challenge && !strings.Contains(got, `realm="test"`) {
				t.Fatalf("Proxy-Authenticate %q; want the parent's", got)
			}
			if !tc.challenge {
				return
			}
			req, _ := http.NewRequest("GET", "http://"+origin+"/challenge", nil)
			req.Header.Set("Proxy-Authorization", basicAuth("alice", "s3cret"))
			resp, err = p.client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("with the credentials the challenge asked for: %d; want 200", resp.StatusCode)
			}
		})
	}
}

// TestSquidSiblingHitAndMiss: a caching Squid sibling serves what it holds
// (SIBLING_HIT in peerd's access log); for what it does not hold it answers
// 504 to only-if-cached, which peerd treats as a miss and goes to the parent.
func TestSquidSiblingHitAndMiss(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, originHandler)
	sib := startSquid(t, "sibling", "")
	parent := startSquid(t, "parent", "")
	// Warm the sibling's cache directly.
	su, _ := url.Parse("http://" + sib.addr)
	direct := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(su)}, Timeout: 10 * time.Second}
	resp, err := direct.Get("http://" + origin + "/cacheable/hit")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	dir := t.TempDir()
	accessLog := filepath.Join(dir, "access.log")
	p := startPeerd(t, strings.Replace(baseConfig, "[log]\n", fmt.Sprintf("[log]\naccess_log = %q\n", accessLog), 1)+
		peerBlock(`type = "sibling"`, sib)+peerBlock("", parent))
	c := p.client()
	for _, path := range []string{"/cacheable/hit", "/cacheable/miss"} {
		resp, err := c.Get("http://" + origin + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "origin "+path {
			t.Fatalf("%s: %d %q", path, resp.StatusCode, body)
		}
	}
	p.stop() // flushes the access log
	b, _ := os.ReadFile(accessLog)
	log := string(b)
	if !strings.Contains(log, "/cacheable/hit - SIBLING_HIT/127.0.0.1") {
		t.Fatalf("no SIBLING_HIT for the cached URL:\n%s", log)
	}
	if !strings.Contains(log, "/cacheable/miss - FIRSTUP_PARENT/127.0.0.1") {
		t.Fatalf("miss not served by the parent:\n%s", log)
	}
	waitFor(t, "the parent logs the miss", 10*time.Second, func() bool { return len(parent.accessLog()) >= 1 })
	if n := len(parent.flushed()); n != 1 {
		t.Fatalf("parent saw %d requests; want 1 (only the miss)", n)
	}
}
