package e2e

// icp_access imported (issue 40): a squid.conf whose http_access lets
// everyone in (so the import's [proxy] allow is everyone) still answers
// ICP only to the sources its icp_access names, in Squid and in peerd
// alike: a HIT would tell an outsider which URLs local users fetched.

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/peerd/peerd/icp"
)

// icpAsk sends one ICP query from the address from to to and returns
// the opcode answered.
func icpAsk(t *testing.T, from, to string) icp.Opcode {
	t.Helper()
	laddr := &net.UDPAddr{IP: net.ParseIP(from)}
	raddr, err := net.ResolveUDPAddr("udp", to)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialUDP("udp", laddr, raddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write((&icp.Message{Op: icp.OpQuery, ReqNum: 41, URL: []byte("http://origin.test/asked")}).Append(nil))
	buf := make([]byte, icp.MaxLen)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no ICP answer from %s to %s: %v", to, from, err)
	}
	var m icp.Message
	if err := m.Parse(buf[:n]); err != nil {
		t.Fatalf("the answer from %s: %v", to, err)
	}
	return m.Op
}

func TestImportedICPAccessAgreesWithSquid(t *testing.T) {
	t.Parallel()
	squidPort := freeUDPPort(t)
	conf := fmt.Sprintf(`icp_port %s
udp_incoming_address 127.0.0.1
acl outsider src 127.0.0.3
acl lan src 127.0.0.0/8
icp_access deny outsider
icp_access allow lan
http_access allow all
`, squidPort)
	startSquid(t, "icpaccess", conf)
	src := filepath.Join(t.TempDir(), "squid.conf")
	os.WriteFile(src, []byte(conf), 0o644)
	out, err := exec.Command(peerdBin, "import-squid", src).Output()
	if err != nil {
		t.Fatalf("import-squid: %v", err)
	}
	// peerd answers on another address of loopback (Squid holds the port
	// on 127.0.0.1); everything else is the import.
	peerdPort := freeUDPPort(t)
	cfg := regexp.MustCompile(`(?m)^listen = "0\.0\.0\.0:\d+"$`).ReplaceAllString(string(out), fmt.Sprintf("listen = \"127.0.0.5:%s\"", peerdPort))
	if !strings.Contains(cfg, "127.0.0.5:") || !strings.Contains(cfg, `allow = ["0.0.0.0/0", "::/0"]`) {
		t.Fatalf("the import is not what the test needs (an ICP listener, [proxy] allow of everyone):\n%s", cfg)
	}
	cfg = strings.Replace(cfg, "[proxy]\n", "[proxy]\nlisten = \"127.0.0.1:0\"\n", 1) + "\n[admin]\nlisten = \"127.0.0.1:0\"\n"
	startPeerd(t, cfg)
	answered := 0
	for _, from := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		s := icpAsk(t, from, "127.0.0.1:"+squidPort)
		p := icpAsk(t, from, "127.0.0.5:"+peerdPort)
		if (s == icp.OpDenied) != (p == icp.OpDenied) {
			t.Errorf("a query from %s: Squid answered %v, peerd %v", from, s, p)
		}
		if p != icp.OpDenied {
			answered++
		}
	}
	if answered != 2 {
		t.Fatalf("peerd answered %d of 3 sources; want the 2 icp_access allows", answered)
	}
}
