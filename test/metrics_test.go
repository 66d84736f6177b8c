package e2e

// The metrics an operator's dashboards need (issue 41): bytes by peer and
// by direction, open client connections, the build, and whether the last
// reload was taken.

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// labelledValue is the value of the first line of a /metrics text that
// matches re (a metric with its labels), -1 for none.
func labelledValue(text string, re *regexp.Regexp) float64 {
	for _, l := range strings.Split(text, "\n") {
		if re.MatchString(l) {
			f, _ := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
			return f
		}
	}
	return -1
}

func TestOperatorMetrics(t *testing.T) {
	t.Parallel()
	a := newFakeParent(t, "a")
	p := startPeerd(t, baseConfig+peerBlock("", a))
	if r := do(p.client(), "POST", "http://origin.test/upload", strings.Repeat("x", 5000)); r.status != 200 {
		t.Fatalf("POST: %s", r)
	}
	checks := []struct {
		re  string
		min float64
	}{
		{`^peerd_peer_bytes_total\{direction="sent",peer="a"\} `, 5000},
		{`^peerd_peer_bytes_total\{direction="received",peer="a"\} `, 10},
		{`^peerd_client_bytes_total\{direction="received"\} `, 5000},
		{`^peerd_client_bytes_total\{direction="sent"\} `, 10},
		{`^peerd_client_connections `, 0},
		{`^peerd_build_info\{goversion="go[0-9.]+",version="[^"]+"\} `, 1},
		{`^peerd_config_last_reload_success `, 1},
		{`^peerd_config_last_reload_timestamp_seconds `, 1e9},
		// Per-peer histograms: the POST's connect and its answer's head.
		{`^peerd_peer_connect_seconds_count\{peer="a"\} `, 1},
		{`^peerd_peer_connect_seconds_bucket\{peer="a",le="\+Inf"\} `, 1},
		{`^peerd_peer_head_seconds_count\{peer="a"\} `, 1},
		{`^peerd_peer_head_seconds_bucket\{peer="a",le="60"\} `, 1},
	}
	// An answer is counted once it is whole, which may be just after
	// the client has it, and its head time not at all when peerd's own
	// stalls (a loaded machine) took all of it: the figures are polled,
	// with a deadline, and another POST sent while the head time lacks.
	var missing []string
	for i, deadline := 0, time.Now().Add(20*time.Second); ; i++ {
		time.Sleep(20 * time.Millisecond)
		if i%10 == 9 && i < 200 {
			if r := do(p.client(), "POST", "http://origin.test/upload", strings.Repeat("x", 5000)); r.status != 200 {
				t.Fatalf("POST: %s", r)
			}
		}
		m := p.adminMetrics()
		missing = missing[:0]
		for _, c := range checks {
			if v := labelledValue(m, regexp.MustCompile(c.re)); v < c.min {
				missing = append(missing, fmt.Sprintf("%s: %v; want at least %v", c.re, v, c.min))
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, m := range missing {
		t.Error(m)
	}
	// A refused reload says so.
	os.WriteFile(p.Config, []byte("[proxy]\nbogus = 1\n"), 0o644)
	if code := p.adminJSON("POST", "/reload", "secret", nil); code == 200 {
		t.Fatal("a bad config was reloaded")
	}
	if v := metricValue(p.adminMetrics(), "peerd_config_last_reload_success"); v != 0 {
		t.Fatalf("peerd_config_last_reload_success %v after a refused reload; want 0", v)
	}
}
