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

	"github.com/peerd/peerd/internal/testbed"
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

// judgeCase is one squid.conf for the differential test: its extra
// lines (%[1]s, %[2]s are two fake parents' ports), the requests, and
// the clients they come from.
type judgeCase struct {
	name    string
	conf    string
	reqs    []judgeReq
	clients []string
	// bothParents: the case sends requests to each parent.
	bothParents bool
	// hosts are more names Squid's hosts file resolves to 127.0.0.1.
	hosts string
	// files are written into a directory both Squid and peerd can read;
	// "%[3]s" in conf names that directory.
	files map[string]string
	// routing: the case tests which parent answers, not refusals.
	routing bool
	// ownAccess: conf holds every http_access line (none may be the
	// case); otherwise "allow localhost, deny all" follow it.
	ownAccess bool
	// allRefused: the case refuses every request (both must).
	allRefused bool
}

// judgeReq is one request: its method, target, Proxy-Authorization and
// more header lines ("User-Agent:\r\n").
type judgeReq struct{ method, target, auth, header string }

// outcome is what a client saw: refused (403), challenged (407), or
// which parent answered ("" for none: DIRECT or an error).
type outcome struct {
	refused    bool
	challenged bool
	parent     string
}

func TestImportedAccessAgreesWithSquid(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "origin") })
	_, oport, _ := net.SplitHostPort(origin)
	var matrix []judgeReq
	for _, host := range []string{"127.0.0.1:" + oport, "www.blocked.test", "ok.test", "ok.test:25", "ok.test:8080"} {
		for _, path := range []string{"/", "/setup.EXE", "/squid-internal-mgr/menu"} {
			matrix = append(matrix, judgeReq{"GET", "http://" + host + path, "", ""}, judgeReq{"POST", "http://" + host + path, "", ""})
		}
	}
	for _, target := range []string{"ok.test:443", "ok.test:8443", "www.blocked.test:443", "127.0.0.1:" + oport} {
		matrix = append(matrix, judgeReq{"CONNECT", target, "", ""})
	}
	var routed []judgeReq
	for _, host := range []string{"www.media.test", "media.test", "ok.test", "www.corp.test", "x.other.test"} {
		routed = append(routed, judgeReq{"GET", "http://" + host + "/", "", ""}, judgeReq{"HEAD", "http://" + host + "/a", "", ""})
	}
	three := []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}
	for _, jc := range []judgeCase{
		{name: "http_access", conf: importedAccess, reqs: matrix, clients: three},
		{name: "cache_peer_access", bothParents: true, clients: three, reqs: routed, conf: `cache_peer 127.0.0.1 parent %[2]s 0 no-query name=pb
cache_peer 127.0.0.1 parent %[1]s 0 no-query name=pa
acl media dstdomain .media.test
acl net3 src 127.0.0.3
cache_peer_access pb allow media
cache_peer_access pb deny all
never_direct allow all
http_access deny net3
`},
		{name: "default and never_direct", clients: three, reqs: routed, conf: `cache_peer 127.0.0.1 parent %[1]s 0 no-query name=pa default
cache_peer 127.0.0.1 parent %[2]s 0 no-query name=pb
acl corp dstdomain .corp.test
acl net2 src 127.0.0.2
always_direct allow corp
never_direct allow all
http_access allow net2
`},
	} {
		t.Run(jc.name, func(t *testing.T) { judge(t, jc) })
	}
}

// judge runs one case: Squid on the squid.conf, peerd on its import,
// the same requests to both.
func judge(t *testing.T, jc judgeCase) {
	pa, pb := newFakeParent(t, "pa"), newFakeParent(t, "pb")
	dir := t.TempDir()
	// Squid resolves the test names from a hosts file (its DNS would time
	// out); peerd fails to resolve them, which is not a refusal either.
	hostsDir, err := os.MkdirTemp("", "peerd-hosts-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hostsDir) })
	os.Chmod(hostsDir, 0o755) // Squid reads it as its own user
	for name, content := range jc.files {
		os.WriteFile(filepath.Join(hostsDir, name), []byte(content), 0o644)
	}
	conf := jc.conf
	if strings.Contains(conf, "%[") {
		conf = fmt.Sprintf(conf, pa.port(), pb.port(), hostsDir)
	}
	hosts := filepath.Join(hostsDir, "hosts")
	os.WriteFile(hosts, []byte("127.0.0.1 ok.test www.blocked.test www.corp.test "+jc.hosts+"\n"), 0o644)
	sq := startSquidWith(t, testbed.SquidOptions{Name: "judge", Extra: "hosts_file " + hosts + "\n" + conf, OwnAccess: jc.ownAccess})
	src := filepath.Join(dir, "squid.conf")
	tail := squidTail
	if jc.ownAccess {
		tail = ""
	}
	os.WriteFile(src, []byte(conf+tail), 0o644)
	var stderr strings.Builder
	cmd := exec.Command(peerdBin, "import-squid", src)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("import-squid: %v\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "widened") || strings.Contains(stderr.String(), "not carried over (") {
		t.Fatalf("import-squid could not carry every access line over:\n%s", stderr.String())
	}
	cfg := strings.Replace(string(out), "[proxy]\n", "[proxy]\nlisten = \"127.0.0.1:0\"\nconnect_timeout = \"1s\"\n", 1)
	cfg += fmt.Sprintf("\n[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"secret\"\n[log]\naccess_log = %q\n", filepath.Join(dir, "access.log"))
	if strings.Contains(cfg, "\n[access]\n") {
		cfg = strings.Replace(cfg, "\n[access]\n", "\n[access]\ndeny_to_local = false\n", 1)
	} else {
		cfg += "[access]\ndeny_to_local = false\n"
	}
	p := startPeerd(t, cfg)

	ask := func(proxy, client string, r judgeReq) outcome {
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
		auth := ""
		if r.auth != "" {
			auth = "Proxy-Authorization: " + r.auth + "\r\n"
		}
		fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\n%s%sContent-Length: %d\r\nConnection: close\r\n\r\n%s", r.method, r.target, host, auth, r.header, len(body), body)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: r.method})
		if err != nil {
			cl, _ := os.ReadFile(filepath.Join(sq.Dir, "cache.log"))
			t.Fatalf("%s %s via %s from %s: %v\n%s", r.method, r.target, proxy, client, err, cl)
		}
		resp.Body.Close()
		return outcome{refused: resp.StatusCode == http.StatusForbidden, challenged: resp.StatusCode == http.StatusProxyAuthRequired,
			parent: resp.Header.Get("X-Parent")}
	}
	checked, denied, parents := 0, 0, 0
	for _, client := range jc.clients {
		for _, r := range jc.reqs {
			s, pd := ask(sq.addr, client, r), ask(p.proxy, client, r)
			if s != pd {
				t.Errorf("%s %s (auth %q, header %q) from %s: Squid %+v, peerd %+v", r.method, r.target, r.auth, r.header, client, s, pd)
			}
			checked++
			if s.refused || s.challenged {
				denied++
			}
			if s.parent != "" {
				parents++
			}
		}
	}
	t.Logf("%d requests from %d clients: Squid and peerd agree (%d refused by both, %d through the same parent)", checked, len(jc.clients), denied, parents)
	if jc.bothParents && (pa.requests("GET") == 0 || pb.requests("GET") == 0) {
		t.Fatalf("GETs: pa %d, pb %d; the case should use both parents", pa.requests("GET"), pb.requests("GET"))
	}
	if jc.allRefused && denied != checked {
		t.Fatalf("%d of %d refused; the case refuses every request", denied, checked)
	}
	if !jc.routing && !jc.allRefused && (denied == 0 || denied == checked) {
		t.Fatalf("%d of %d refused: the case does not test access", denied, checked)
	}
}
