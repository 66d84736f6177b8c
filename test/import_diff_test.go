package e2e

// import-squid against real Squid (issue 24): one squid.conf's access
// controls run in Squid and, imported, in peerd; the same requests from
// three client addresses (methods, ports, domains, paths, CONNECT) get a
// refusal from both or from neither. peerd may refuse more only where the
// importer said it widened a line (none here).

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const importedAccess = `acl net2 src 127.0.0.2/32
acl net3 src 127.0.0.3
acl SSL_ports port 443
acl Safe_ports port 80 443 1025-65535
acl CONNECT method CONNECT
acl blocked dstdomain .blocked.test
acl exe urlpath_regex -i \.exe$
acl posts method POST
http_access deny !Safe_ports
http_access deny CONNECT !SSL_ports
http_access deny manager
http_access deny blocked
http_access deny net3 exe
http_access allow net2 !posts
http_access deny net2
`

// squidTail is what startSquid appends after its extra lines.
const squidTail = "http_access allow localhost\nhttp_access deny all\n"

func TestImportedAccessAgreesWithSquid(t *testing.T) {
	dir := t.TempDir()
	// Squid resolves the test names from a hosts file (its DNS would time
	// out); peerd fails to resolve them, which is not a refusal either.
	hostsDir, err := os.MkdirTemp("", "peerd-hosts-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hostsDir) })
	os.Chmod(hostsDir, 0o755) // Squid reads it as its own user
	hosts := filepath.Join(hostsDir, "hosts")
	os.WriteFile(hosts, []byte("127.0.0.1 ok.test www.blocked.test\n"), 0o644)
	sq := startSquid(t, "judge", "hosts_file "+hosts+"\n"+importedAccess)
	src := filepath.Join(dir, "squid.conf")
	os.WriteFile(src, []byte(importedAccess+squidTail), 0o644)
	var stderr strings.Builder
	cmd := exec.Command(peerdBin, "import-squid", src)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("import-squid: %v\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "widened") || strings.Contains(stderr.String(), "http_access") {
		t.Fatalf("import-squid could not carry every http_access line over:\n%s", stderr.String())
	}
	cfg := strings.Replace(string(out), "[proxy]\n", "[proxy]\nlisten = \"127.0.0.1:0\"\nconnect_timeout = \"1s\"\n", 1)
	cfg += fmt.Sprintf("\n[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"secret\"\n[log]\naccess_log = %q\n", filepath.Join(dir, "access.log"))
	if strings.Contains(cfg, "\n[access]\n") {
		cfg = strings.Replace(cfg, "\n[access]\n", "\n[access]\ndeny_to_local = false\n", 1)
	} else {
		cfg += "[access]\ndeny_to_local = false\n"
	}
	p := startPeerd(t, cfg)

	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "origin") })
	_, oport, _ := net.SplitHostPort(origin)

	type req struct{ method, target string }
	var reqs []req
	for _, host := range []string{"127.0.0.1:" + oport, "www.blocked.test", "ok.test", "ok.test:25", "ok.test:8080"} {
		for _, path := range []string{"/", "/setup.EXE", "/squid-internal-mgr/menu"} {
			reqs = append(reqs, req{"GET", "http://" + host + path}, req{"POST", "http://" + host + path})
		}
	}
	for _, target := range []string{"ok.test:443", "ok.test:8443", "www.blocked.test:443", "127.0.0.1:" + oport} {
		reqs = append(reqs, req{"CONNECT", target})
	}
	refused := func(proxy, client string, r req) bool {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(client)}, Timeout: 5 * time.Second}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := d.DialContext(ctx, "tcp", proxy)
		if err != nil {
			t.Fatalf("dial %s from %s: %v", proxy, client, err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		host := r.target
		if r.method != "CONNECT" {
			pu, _ := url.Parse(r.target)
			host = pu.Host
		}
		body := ""
		if r.method == "POST" {
			body = "x=1"
		}
		fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", r.method, r.target, host, len(body), body)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: r.method})
		if err != nil {
			cl, _ := os.ReadFile(filepath.Join(sq.Dir, "cache.log"))
			t.Fatalf("%s %s via %s from %s: %v\n%s", r.method, r.target, proxy, client, err, cl)
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusForbidden
	}
	checked, denied := 0, 0
	for _, client := range []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"} {
		for _, r := range reqs {
			s, pd := refused(sq.addr, client, r), refused(p.proxy, client, r)
			if s != pd {
				t.Errorf("%s %s from %s: Squid refused=%v, peerd refused=%v", r.method, r.target, client, s, pd)
			}
			checked++
			if s {
				denied++
			}
		}
	}
	t.Logf("%d requests from 3 clients: Squid and peerd agree (%d refused by both)", checked, denied)
	if denied == 0 || denied == checked {
		t.Fatalf("%d of %d refused: the matrix does not test anything", denied, checked)
	}
}
