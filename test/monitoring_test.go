package e2e

// The shipped monitoring pack (contrib/monitoring): its alert rules pass
// promtool's checks and unit tests, and every metric its rules and its
// dashboard name is one a running peerd exports.

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const monitoringDir = "../contrib/monitoring"

func TestMonitoringRules(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("promtool"); err != nil {
		if os.Getenv("PEERD_REQUIRE_PROMTOOL") != "" {
			t.Fatal("promtool is not installed (Debian: apt-get install prometheus)")
		}
		t.Skip("promtool is not installed: the alert rules are not checked")
	}
	for _, args := range [][]string{{"check", "rules", "peerd-alerts.yml"}, {"test", "rules", "peerd-alerts.test.yml"}} {
		cmd := exec.Command("promtool", args...)
		cmd.Dir = monitoringDir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// packMetrics are the metric names the pack's rules and dashboard query,
// histogram series folded to their family.
func packMetrics(t *testing.T) map[string][]string {
	t.Helper()
	names := map[string][]string{}
	name := regexp.MustCompile(`\bpeerd_[a-z_]+`)
	add := func(file, expr string) {
		for _, n := range name.FindAllString(expr, -1) {
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				if strings.HasSuffix(n, "_seconds"+suffix) {
					n = strings.TrimSuffix(n, suffix)
				}
			}
			names[n] = append(names[n], file)
		}
	}
	rules, err := os.ReadFile(filepath.Join(monitoringDir, "peerd-alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(rules), "\n") {
		if l = strings.TrimSpace(l); !strings.HasPrefix(l, "#") {
			add("peerd-alerts.yml", l)
		}
	}
	raw, err := os.ReadFile(filepath.Join(monitoringDir, "peerd-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Query any `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("peerd-dashboard.json: %v", err)
	}
	panels := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			add("peerd-dashboard.json ("+p.Title+")", tg.Expr)
			panels++
		}
	}
	for _, v := range dash.Templating.List {
		add("peerd-dashboard.json (variables)", fmt.Sprint(v.Query))
	}
	if panels < 10 || len(names) < 15 {
		t.Fatalf("the dashboard has %d queries, the pack names %d metrics", panels, len(names))
	}
	return names
}

// TestMonitoringPackNamesExportedMetrics runs peerd with a cache on disk,
// a parent that drops requests and one that answers (so that a retry, a
// request, a connect and a head are counted), and finds every metric the
// pack names in its /metrics.
func TestMonitoringPackNamesExportedMetrics(t *testing.T) {
	t.Parallel()
	dropper := tcpServer(t, func(c net.Conn) {
		buf := make([]byte, 4096)
		c.Read(buf) // the request, then nothing
		c.Close()
	})
	good := newFakeParent(t, "good")
	_, dropPort, _ := strings.Cut(dropper, ":")
	cfg := baseConfig + policy("first-up") + fmt.Sprintf("[cache]\ndisk = %q\n", t.TempDir()) +
		fmt.Sprintf("[[peer]]\nname = \"dropper\"\nhost = \"127.0.0.1\"\nport = %s\n", dropPort) + peerBlock("", good)
	p := startPeerd(t, cfg)
	waitFor(t, "a request answered after a retry", 10*time.Second, func() bool {
		return do(p.client(), "GET", fmt.Sprintf("http://origin.test/m%d", time.Now().UnixNano()), "").status == 200 &&
			strings.Contains(p.adminMetrics(), "peerd_retries_total{")
	})
	exported := map[string]bool{}
	for _, l := range strings.Split(p.adminMetrics(), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			exported[f[2]] = true
		}
	}
	for name, where := range packMetrics(t) {
		if !exported[name] {
			t.Errorf("%s (named in %s) is not exported by peerd", name, strings.Join(where, ", "))
		}
	}
}

// TestMonitoringScrapeExample: the pack's README scrape example works as
// written: a peerd configured with the [admin] hosts line it shows
// answers a scrape under the target's name, and the same scrape without
// that line gets 421 (which is what PeerdDown then reports).
func TestMonitoringScrapeExample(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join(monitoringDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	target := regexp.MustCompile(`targets: \["([^"]+)"`).FindStringSubmatch(string(readme))
	hosts := regexp.MustCompile(`(?m)^hosts = \[.*\]$`).FindString(string(readme))
	if target == nil || hosts == "" {
		t.Fatalf("the README has no scrape target (%v) or no [admin] hosts line (%q)", target, hosts)
	}
	scrape := func(p *peerd) int {
		req, _ := http.NewRequest("GET", "http://"+p.admin+"/metrics", nil)
		req.Host = target[1] // as Prometheus sends it
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	base := strings.Replace(baseConfig, `direct = "never"`, `direct = "allow"`, 1)
	with := startPeerd(t, strings.Replace(base, "[admin]\n", "[admin]\n"+hosts+"\n", 1))
	if code := scrape(with); code != 200 {
		t.Fatalf("a scrape of %s with the README's %s: %d; want 200", target[1], hosts, code)
	}
	without := startPeerd(t, base)
	if code := scrape(without); code != http.StatusMisdirectedRequest {
		t.Fatalf("a scrape of %s without [admin] hosts: %d; want 421 (why the README shows the line)", target[1], code)
	}
}
