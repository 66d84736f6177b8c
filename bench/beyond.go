package main

// This file holds section 6c, health beyond the parent's door, peerd and
// Squid as the child on the same topology. "origin": three real Squid
// parents under round-robin, one of which cannot reach bad.bench (its
// connect there refused: 503 ERR_CONNECT_FAIL); 150 requests for
// bad.bench and 150 for good.bench, then its way to bad.bench returns.
// "hierarchy": two peerd parents, one of which has lost its only next hop
// (it answers no-peers); 100 requests, then its next hop returns. The row
// shows the client's failures, what the broken parent still got of what it
// could not carry, its share of the rest, and how soon the child sent it
// traffic again once it could.

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peerd/peerd/internal/testbed"
)

// BeyondRow is one child's run of one phase.
type BeyondRow struct {
	Child string `json:"child"`
	Phase string `json:"phase"`
	// Requests the client sent for what the broken parent cannot carry
	// (bad.bench, or anything in the hierarchy), and how many failed.
	Requests int `json:"requests"`
	Failed   int `json:"failed"`
	// OthersFailed is the failures of the requests for good.bench
	// (origin phase).
	OthersFailed int `json:"others_failed"`
	// Leaked is what the broken parent got of what it cannot carry after
	// the first ten requests (origin), or after its first answer saying
	// it has no next hop (hierarchy).
	Leaked int `json:"broken_parent_requests_after"`
	// OthersShare is the broken parent's part of the requests for
	// good.bench (origin: a third is its share).
	OthersShare float64 `json:"broken_parent_share_of_others"`
	// BackSeconds is how long after the broken parent could carry again
	// the child sent it traffic (-1: the child never stopped).
	BackSeconds float64 `json:"back_seconds"`
}

// beyondRun runs both phases for peerd and, when there is one, Squid.
func beyondRun(work, peerdBin, squidBin string) []BeyondRow {
	if squidBin == "" {
		fmt.Fprintln(os.Stderr, "beyond: no squid: the origin phase needs real Squid parents; skipped")
		return nil
	}
	var rows []BeyondRow
	for _, kind := range []string{"peerd", "squid"} {
		rows = append(rows, beyondOrigin(work, kind, peerdBin, squidBin))
	}
	for _, kind := range []string{"peerd", "squid"} {
		rows = append(rows, beyondHierarchy(work, kind, peerdBin, squidBin))
	}
	return rows
}

// hostsSquid starts a real Squid parent resolving names from hosts.
func hostsSquid(work, bin, name string, hosts map[string]string) *testbed.Squid {
	dir, _ := os.MkdirTemp(work, "squid-"+name+"-")
	os.Chmod(dir, 0o777)
	var b strings.Builder
	for n, a := range hosts {
		fmt.Fprintf(&b, "%s %s\n", a, n)
	}
	f := filepath.Join(dir, "hosts")
	must(os.WriteFile(f, []byte(b.String()), 0o644))
	sq, err := testbed.StartSquid(bin, dir, testbed.SquidOptions{Name: name, Extra: "hosts_file " + f + "\nconnect_retries 0\nforward_max_tries 1\n"})
	must(err)
	return sq
}

// countHost counts a Squid's access log lines for host.
func countHost(sq *testbed.Squid, host string) int {
	n := 0
	for _, l := range sq.AccessLog() {
		if strings.Contains(l, "://"+host+":") {
			n++
		}
	}
	return n
}

func beyondOrigin(work, kind, peerdBin, squidBin string) BeyondRow {
	originAddr, stopOrigin := noStoreOrigin("origin")
	defer stopOrigin()
	port := portOf(originAddr)
	good := map[string]string{"bad.bench": "127.0.0.1", "good.bench": "127.0.0.1"}
	sq := []*testbed.Squid{
		hostsSquid(work, squidBin, "squid1", map[string]string{"bad.bench": "127.0.0.2", "good.bench": "127.0.0.1"}),
		hostsSquid(work, squidBin, "squid2", good), hostsSquid(work, squidBin, "squid3", good)}
	defer func() {
		for _, s := range sq {
			s.Kill()
		}
	}()
	hops := []hop{{name: "squid1", port: sq[0].Port()}, {name: "squid2", port: sq[1].Port()}, {name: "squid3", port: sq[2].Port()}}
	var c *child
	if kind == "peerd" {
		c = startPeerd(work, peerdBin, hops, `direct = "never"`)
	} else {
		c = startSquid(work, squidBin, hops)
	}
	defer c.stop()
	cl := proxyClient(c.addr, 15*time.Second)
	row := BeyondRow{Child: kind, Phase: "origin"}
	var afterTen int
	for i := 0; i < 150; i++ {
		if !getOK(cl, fmt.Sprintf("http://bad.bench:%s/%d", port, i)) {
			row.Failed++
		}
		if !getOK(cl, fmt.Sprintf("http://good.bench:%s/%d", port, i)) {
			row.OthersFailed++
		}
		if i == 9 {
			afterTen = countHost(sq[0], "bad.bench")
		}
	}
	row.Requests = 150
	time.Sleep(time.Second) // Squid writes its log lines a moment after
	row.Leaked = countHost(sq[0], "bad.bench") - afterTen
	row.OthersShare = float64(countHost(sq[0], "good.bench")) / 150
	row.BackSeconds = -1
	if kind != "peerd" {
		return row
	}
	// Its way to bad.bench returns.
	ln2, err := net.Listen("tcp", "127.0.0.2:"+port)
	must(err)
	srv2 := &http.Server{Handler: noStore("origin")}
	go srv2.Serve(ln2)
	defer srv2.Close()
	back := time.Now()
	for time.Since(back) < 30*time.Second {
		var st struct {
			Unreachable []json.RawMessage `json:"unreachable"`
		}
		if adminGet(c.admin, "/peers/squid1", &st) == nil && len(st.Unreachable) == 0 {
			row.BackSeconds = time.Since(back).Seconds()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return row
}

func beyondHierarchy(work, kind, peerdBin, squidBin string) BeyondRow {
	originAddr, stopOrigin := noStoreOrigin("origin")
	defer stopOrigin()
	upPort := freePort() // p1's only next hop: nothing listens yet
	parent := func(name, extra string) *testbed.Peerd {
		dir, _ := os.MkdirTemp(work, "peerd-"+name+"-")
		cfg := fmt.Sprintf("[proxy]\nlisten = \"127.0.0.1:0\"\nname = %q\n%s\n[admin]\nlisten = \"127.0.0.1:0\"\n[log]\nlevel = \"info\"\naccess_log = %q\n[access]\ndeny_to_local = false\n[health]\nconnect_fail_limit = 1\nprobe_interval = \"200ms\"\nprobe_max_interval = \"500ms\"\n",
			name, extra, filepath.Join(dir, "access.log"))
		if name == "p1" {
			cfg += fmt.Sprintf("[[peer]]\nname = \"up\"\nhost = \"127.0.0.1\"\nport = %s\n", upPort)
		}
		pd, err := testbed.StartPeerd(peerdBin, dir, cfg)
		must(err)
		return pd
	}
	p1, p2 := parent("p1", `direct = "never"`), parent("p2", `direct = "allow"`)
	defer p1.Stop()
	defer p2.Stop()
	hops := []hop{{name: "p1", port: portOf(p1.Proxy)}, {name: "p2", port: portOf(p2.Proxy)}}
	var c *child
	if kind == "peerd" {
		c = startPeerd(work, peerdBin, hops, `direct = "never"`)
	} else {
		c = startSquid(work, squidBin, hops)
	}
	defer c.stop()
	cl := proxyClient(c.addr, 15*time.Second)
	row := BeyondRow{Child: kind, Phase: "hierarchy", Requests: 100, BackSeconds: -1}
	lines := func() []string {
		b, _ := os.ReadFile(filepath.Join(p1.Dir, "access.log"))
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	for i := 0; i < 100; i++ {
		if !getOK(cl, fmt.Sprintf("http://%s/h/%d", originAddr, i)) {
			row.Failed++
		}
	}
	time.Sleep(1500 * time.Millisecond) // peerd flushes its access log every second
	got := 0
	for _, l := range lines() {
		if strings.Contains(l, "/h/") {
			got++
		}
	}
	row.Leaked = max(got-1, 0) // after its first such answer
	if kind != "peerd" {
		return row
	}
	// p1's next hop returns.
	up, err := net.Listen("tcp", "127.0.0.1:"+upPort)
	must(err)
	upSrv := &http.Server{Handler: noStore("origin")}
	go upSrv.Serve(up)
	defer upSrv.Close()
	var back time.Time
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var st struct{ State string }
		if back.IsZero() && adminGet(p1.Admin, "/peers/up", &st) == nil && st.State == "alive" {
			back = time.Now()
		}
		var cst struct {
			NoNextHop bool `json:"no_next_hop"`
		}
		if !back.IsZero() && adminGet(c.admin, "/peers/p1", &cst) == nil && !cst.NoNextHop {
			row.BackSeconds = time.Since(back).Seconds()
			break
		}
	}
	return row
}

// adminGet reads an admin API path as JSON into v.
func adminGet(admin, path string, v any) error {
	resp, err := http.Get("http://" + admin + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: %d", path, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func (r *Results) beyondSection() string {
	if len(r.Beyond) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## 6c. Health beyond the parent's door: one of three Squid parents cannot reach bad.bench (origin: 150 requests for it, 150 for good.bench); one of two peerd parents has lost its only next hop (hierarchy: 100 requests)\n\n")
	b.WriteString("| child | phase | requests | failed | others failed | broken parent's requests after (origin: the first 10; hierarchy: its first no-next-hop answer) | its share of the others | sent to again after it could carry (s) |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, g := range r.Beyond {
		back, share, others := "never stopped", "—", "—"
		if g.BackSeconds >= 0 {
			back = fmt.Sprintf("%.2f", g.BackSeconds)
		}
		if g.Phase == "origin" {
			share, others = fmt.Sprintf("%.1f %%", 100*g.OthersShare), fmt.Sprint(g.OthersFailed)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %s | %d | %s | %s |\n", g.Child, g.Phase, g.Requests, g.Failed, others, g.Leaked, share, back)
	}
	return b.String()
}

// BeyondMem is peerd's memory as one parent says it cannot reach any of
// a million destinations.
type BeyondMem struct {
	Hosts, Asked   int     // distinct destinations, and how many times each
	IdleMiB        float64 // RSS before
	AfterMiB       float64 // RSS after
	Marked         int     // destinations the parent is marked unable to reach at the end
	MarkedTotal    int64   // marks ever made
	Seconds        float64
	RequestsPerSec float64
}

// beyondMemRun asks, through one parent that cannot reach anything, a
// million destinations once each, then a hundred thousand three times
// each (each marked, the table cycling through its bound).
func beyondMemRun(work, peerdBin string) []BeyondMem {
	p := newParent("p1")
	defer p.Close()
	p.SetStatus(503)
	p.SetHeader("X-Squid-Error", "ERR_CONNECT_FAIL 111")
	c := startPeerd(work, peerdBin, []hop{hopOf(p)}, `direct = "never"`)
	defer c.stop()
	var out []BeyondMem
	for _, ph := range []struct{ hosts, asked int }{{1_000_000, 1}, {100_000, 3}} {
		m := BeyondMem{Hosts: ph.hosts, Asked: ph.asked, IdleMiB: testbed.RSSMiB(c.pid)}
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cl := proxyClient(c.addr, 10*time.Second)
				for {
					i := int(next.Add(1)) - 1
					if i >= ph.hosts*ph.asked {
						return
					}
					getOK(cl, fmt.Sprintf("http://h%d-%d.beyond.bench/", ph.asked, i/ph.asked))
				}
			}()
		}
		wg.Wait()
		m.Seconds = time.Since(start).Seconds()
		m.RequestsPerSec = float64(ph.hosts*ph.asked) / m.Seconds
		m.AfterMiB = testbed.RSSMiB(c.pid)
		var st struct {
			Unreachable []json.RawMessage `json:"unreachable"`
		}
		adminGet(c.admin, "/peers/p1", &st)
		m.Marked = len(st.Unreachable)
		out = append(out, m)
	}
	return out
}

func (r *Results) beyondMemSection() string {
	if len(r.BeyondMem) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## 6d. A million destinations one parent cannot reach: peerd's memory\n\n")
	b.WriteString("| destinations | asked each | RSS before MiB | RSS after MiB | marked at the end | req/s |\n|---:|---:|---:|---:|---:|---:|\n")
	for _, m := range r.BeyondMem {
		fmt.Fprintf(&b, "| %d | %d | %.1f | %.1f | %d | %.0f |\n", m.Hosts, m.Asked, m.IdleMiB, m.AfterMiB, m.Marked, m.RequestsPerSec)
	}
	return b.String()
}
