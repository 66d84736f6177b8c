package e2e

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestStatusPageInABrowser renders GET / on the admin address in headless
// Chromium: the DOM names every peer and its state, and a screenshot of a
// page with one dead peer is not blank. Without a browser the test skips,
// unless PEERD_REQUIRE_BROWSER=1 (CI) makes that a failure.
func TestStatusPageInABrowser(t *testing.T) {
	browser := ""
	for _, b := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(b); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		if os.Getenv("PEERD_REQUIRE_BROWSER") == "1" {
			t.Fatal("no headless browser (chromium) installed, and PEERD_REQUIRE_BROWSER=1")
		}
		t.Skip("no headless browser installed (apt-get install -y chromium); skipping the status page test")
	}
	a, b, c := newFakeParent(t, "alpha"), newFakeParent(t, "bravo"), newFakeParent(t, "charlie")
	b.stop() // the first probe finds it dead
	p := startPeerd(t, baseConfig+health(1, "1h", "1h")+peerBlock("", a, b, c))
	waitFor(t, "bravo dead", 10*time.Second, func() bool { return p.peer("bravo").State == "dead" })
	// Some traffic for alpha's charts, and charlie drained: its state
	// stays alive, its admin badge says drain.
	for i := range 20 {
		if r := do(p.client(), "GET", fmt.Sprintf("http://origin.test/%d", i), ""); r.status != 200 {
			t.Fatalf("GET: %s", r)
		}
	}
	if code, out := cli(t, []string{"PEERD_ADMIN_TOKEN=secret"}, "drain", "charlie", "-reason", "kernel upgrade", "-admin", p.admin); code != 0 {
		t.Fatalf("drain charlie: %d %s", code, out)
	}
	url := "http://" + p.admin + "/"
	dir := t.TempDir()
	chrome := func(args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
			"--user-data-dir=" + filepath.Join(dir, "profile"), "--hide-scrollbars"}
		cmd := exec.CommandContext(ctx, browser, append(base, args...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %v: %v\n%s", browser, args, err, errb.String())
		}
		return out.Bytes()
	}
	dom := string(chrome("--dump-dom", url))
	for _, want := range []string{"alpha", "bravo", `badge alive">alive`, `badge dead">dead`, "2 alive", "1 dead",
		`badge admin-drain">drain`, "kernel upgrade", "dead for ", "next probe in ", "policy <b>first-up</b>", "up ", "last config load",
		`<svg class="chart"`, `<polyline class="req"`, `<polyline class="p99"`, "head time p50 / p99"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the rendered page lacks %q:\n%s", want, dom)
		}
	}
	// alpha's 20 requests: at least 1 a second in the busiest slot,
	// however the 10 s slots split them.
	if !regexp.MustCompile(`requests, last 15 minutes \(max [1-9]`).MatchString(dom) {
		t.Errorf("no request rate charted for alpha:\n%s", dom)
	}
	// Each chart shows its scale on the chart itself.
	if !regexp.MustCompile(`<text class="max"[^>]*>max [0-9.]+ /s</text>`).MatchString(dom) {
		t.Errorf("no scale drawn on the request chart:\n%s", dom)
	}
	// bravo is dead: no latency share beside it.
	if m := regexp.MustCompile(`(?s)<td class="peer">bravo</td>.*?<td class="num share">([^<]*)</td>`).FindStringSubmatch(dom); m == nil || m[1] != "" {
		t.Errorf("bravo, dead, shows a latency share %q", m)
	}
	shot := filepath.Join(dir, "status.png")
	chrome("--screenshot="+shot, "--window-size=1200,700", url)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	colours := map[uint32]bool{}
	bnd := img.Bounds()
	for y := bnd.Min.Y; y < bnd.Max.Y; y += 4 {
		for x := bnd.Min.X; x < bnd.Max.X; x += 4 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colours[(r>>8)<<16|(g>>8)<<8|bl>>8] = true
		}
	}
	if len(colours) < 8 {
		t.Fatalf("the screenshot has %d colours: blank", len(colours))
	}
}
