package e2e

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
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
	a, b := newFakeParent(t, "alpha"), newFakeParent(t, "bravo")
	b.stop() // the first probe finds it dead
	p := startPeerd(t, baseConfig+health(1, "1h", "1h")+peerBlock("", a, b))
	waitFor(t, "bravo dead", 10*time.Second, func() bool { return p.peer("bravo").State == "dead" })
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
	for _, want := range []string{"alpha", "bravo", `badge alive">alive`, `badge dead">dead`, "1 alive", "1 dead"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the rendered page lacks %q:\n%s", want, dom)
		}
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
