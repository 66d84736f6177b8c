// Command bench compares peerd with direct access and with Squid as the
// child proxy, in one run on loopback: keep-alive throughput and latency,
// failover when a parent dies (killed, then restarted) and when a parent's
// host vanishes (SYNs dropped), and memory for idle CONNECT tunnels. It
// prints a table and writes JSON, Markdown and an SVG chart under
// bench/results/. Squid and wrk are used when installed; without Squid its
// columns read n/a, without wrk a Go load generator is used. Every load
// loop is bounded in count and time.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peerd/peerd/internal/testbed"
)

var (
	outDir   = flag.String("out", "bench/results", "results directory")
	duration = flag.Duration("d", 5*time.Second, "throughput run length per target")
	conns    = flag.Int("c", 16, "connections for the throughput runs")
	size     = flag.Int("size", 512, "response body bytes of the throughput runs")
	lowRate  = flag.Int("lowrate", 100, "requests per second for the low-rate latency run through real Squid parents")
	sections = flag.String("run", "throughput,cache,lowrate,failover,memory,fleet,icp", "sections to run, comma-separated")
	threads  = flag.Int("threads", 0, "worker threads of each child (peerd GOMAXPROCS, ATS exec threads; Squid has one); 0: each child's default (one per core)")
	rounds   = flag.Int("rounds", 3, "interleaved rounds of the throughput runs; figures are the medians")
	tunnels  = flag.Int("tunnels", 2000, "idle CONNECT tunnels for the memory run")
	rate     = flag.Int("rate", 1000, "requests per second for the fixed-rate latency runs")
)

func main() {
	flag.Parse()
	start := time.Now()
	must(os.MkdirAll(*outDir, 0o755))
	work, err := os.MkdirTemp("", "peerd-bench-")
	must(err)
	os.Chmod(work, 0o777)
	defer os.RemoveAll(work)

	peerdBin := filepath.Join(work, "peerd")
	build := exec.Command("go", "build", "-o", peerdBin, "./cmd/peerd")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	must(build.Run())

	squidBin, _ := exec.LookPath("squid")
	atsBin, _ := exec.LookPath("traffic_server")
	wrkBin, _ = exec.LookPath("wrk")
	res := &Results{
		When:    time.Now().UTC().Format(time.RFC3339),
		Machine: machine(),
		Squid:   squidVersion(squidBin),
		ATS:     atsVersion(atsBin),
		Loader:  "wrk",
	}
	if wrkBin == "" {
		res.Loader = "go"
	}

	if want("throughput") {
		fmt.Fprintln(os.Stderr, "== throughput")
		res.Throughput = throughput(work, peerdBin, squidBin, atsBin)
	}
	if want("cache") {
		fmt.Fprintln(os.Stderr, "== cache: hits and misses, peerd beside Squid's cache_mem")
		res.Cache = cacheRun(work, peerdBin, squidBin)
	}
	if squidBin != "" && want("lowrate") {
		fmt.Fprintf(os.Stderr, "== latency at %d req/s through two real Squid parents\n", *lowRate)
		res.LowRate = lowRateRun(work, peerdBin, squidBin, atsBin)
	}
	if want("failover") {
		fmt.Fprintln(os.Stderr, "== failover: parent killed and restarted")
		res.Failover = []Failover{failover(work, "peerd", peerdBin, "", "kill")}
		if squidBin != "" {
			res.Failover = append(res.Failover, failover(work, "squid", "", squidBin, "kill"))
		}
		fmt.Fprintln(os.Stderr, "== failover: parent black-holed")
		res.Blackhole = []Failover{failover(work, "peerd", peerdBin, "", "blackhole")}
		if squidBin != "" {
			res.Blackhole = append(res.Blackhole, failover(work, "squid", "", squidBin, "blackhole"))
		}
	}
	if want("memory") {
		fmt.Fprintln(os.Stderr, "== memory: idle CONNECT tunnels")
		res.Memory = []Memory{memory(work, "peerd", peerdBin, "")}
		if squidBin != "" {
			res.Memory = append(res.Memory, memory(work, "squid", "", squidBin))
		}
	}
	if want("fleet") {
		fmt.Fprintln(os.Stderr, "== fleet: three peerds, p1 killed, with gossip and without")
		res.Fleet = fleetRun(work, peerdBin, max(1, *rounds))
	}
	if want("icp") {
		fmt.Fprintln(os.Stderr, "== icp: asking a sibling by ICP and by HTTP only-if-cached")
		res.ICP = icpRun(work, peerdBin, squidBin)
	}
	res.Seconds = time.Since(start).Seconds()

	md := res.markdown()
	fmt.Println(md)
	b, _ := json.MarshalIndent(res, "", "  ")
	must(os.WriteFile(filepath.Join(*outDir, "results.json"), b, 0o644))
	must(os.WriteFile(filepath.Join(*outDir, "results.md"), []byte(md), 0o644))
	must(os.WriteFile(filepath.Join(*outDir, "throughput.svg"), []byte(res.svg()), 0o644))
	fmt.Fprintf(os.Stderr, "wrote %s/results.{json,md} and throughput.svg in %.0fs\n", *outDir, res.Seconds)
}

// want reports whether a section was asked for with -run.
func want(section string) bool {
	for _, s := range strings.Split(*sections, ",") {
		if strings.TrimSpace(s) == section {
			return true
		}
	}
	return false
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// ------------------------------------------------------------------ results

type Results struct {
	When       string       `json:"when"`
	Machine    string       `json:"machine"`
	Squid      string       `json:"squid"`
	ATS        string       `json:"ats"`
	Loader     string       `json:"loader"`
	Seconds    float64      `json:"seconds"`
	Throughput []Throughput `json:"throughput"`
	LowRate    []Throughput `json:"low_rate_via_squid_parents"`
	Failover   []Failover   `json:"failover"`
	Blackhole  []Failover   `json:"blackhole"`
	Memory     []Memory     `json:"memory"`
	Cache      []Throughput `json:"cache"`
	Fleet      []FleetRow   `json:"fleet"`
	ICP        []ICPRow     `json:"icp"`
}

// wrkBin is wrk's path ("": load by a Go client).
var wrkBin string

type Throughput struct {
	Target     string  `json:"target"`
	RPS        float64 `json:"rps"`
	P50ms      float64 `json:"p50_ms"`
	P99ms      float64 `json:"p99_ms"`
	Errors     int     `json:"errors"`
	FixedP50ms float64 `json:"fixed_rate_p50_ms"`
	FixedP99ms float64 `json:"fixed_rate_p99_ms"`
	// CPU of the child process over the loaded window: share of one core,
	// and microseconds per request (0: not measured, e.g. direct).
	CPUPct      float64 `json:"child_cpu_pct"`
	CPUusPerReq float64 `json:"child_cpu_us_per_request"`
	// Rounds are the single runs a median was taken over.
	Rounds []Throughput `json:"rounds,omitempty"`
}

type Failover struct {
	Child          string  `json:"child"`
	Scenario       string  `json:"scenario"`
	Requests       int     `json:"requests"`
	ClientErrors   int     `json:"client_errors"`
	Slow100ms      int     `json:"slow_over_100ms"`
	OutageP99ms    float64 `json:"outage_p99_ms"`
	MaxMs          float64 `json:"max_ms"`
	LiveAttempts   string  `json:"live_connect_attempts_to_dead_parent"`
	ReachedDead    int     `json:"requests_reaching_parent_while_dead"`
	DetectionMs    float64 `json:"detection_ms"`
	RevivalMs      float64 `json:"revival_ms"`
	RevivedTraffic bool    `json:"revived_parent_got_traffic"`
}

type Memory struct {
	Child   string  `json:"child"`
	Tunnels int     `json:"tunnels"`
	BaseMiB float64 `json:"rss_idle_mib"`
	RSSMiB  float64 `json:"rss_with_tunnels_mib"`
	PerKiB  float64 `json:"kib_per_tunnel"`
}

func ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func (r *Results) tp(target string) *Throughput {
	for i := range r.Throughput {
		if r.Throughput[i].Target == target {
			return &r.Throughput[i]
		}
	}
	return nil
}

func (r *Results) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# peerd benchmark\n\n%s; %s; Squid %s; ATS %s; load by %s; %.0fs in all.\n\n", r.When, r.Machine, r.Squid, r.ATS, r.Loader, r.Seconds)
	fmt.Fprintf(&b, "## 1. Keep-alive GETs (%d B answers), %d connections, %s per target, median of %d interleaved rounds\n\n", *size, *conns, *duration, max(1, *rounds))
	fmt.Fprintf(&b, "| path | req/s | child CPU %% | CPU µs per request | p50 ms | p99 ms | errors | p50 ms at %d req/s | p99 ms at %d req/s |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n", *rate, *rate)
	for _, t := range r.Throughput {
		cpu, per := "n/a", "n/a"
		if t.CPUusPerReq > 0 {
			cpu, per = fmt.Sprintf("%.0f", t.CPUPct), fmt.Sprintf("%.1f", t.CPUusPerReq)
		}
		fmt.Fprintf(&b, "| %s | %.0f | %s | %s | %.2f | %.2f | %d | %.2f | %.2f |\n", t.Target, t.RPS, cpu, per, t.P50ms, t.P99ms, t.Errors, t.FixedP50ms, t.FixedP99ms)
	}
	d, p, s, a := r.tp(targetDirect), r.tp(targetPeerd), r.tp(targetSquid), r.tp(targetATS)
	if d != nil && p != nil {
		fmt.Fprintf(&b, "\nThroughput peerd/direct = %s", ratio(p.RPS, d.RPS))
		if s != nil && s.RPS > 0 {
			fmt.Fprintf(&b, "; peerd/squid = %s", ratio(p.RPS, s.RPS))
		}
		if a != nil && a.RPS > 0 {
			fmt.Fprintf(&b, "; peerd/ats = %s", ratio(p.RPS, a.RPS))
		}
		b.WriteString(".\n")
	}
	if p != nil && a != nil && len(p.Rounds) == len(a.Rounds) && len(p.Rounds) > 1 {
		b.WriteString("\nPer round, peerd/ATS CPU per request:")
		for i := range p.Rounds {
			fmt.Fprintf(&b, " %s", ratio(p.Rounds[i].CPUusPerReq, a.Rounds[i].CPUusPerReq))
		}
		b.WriteString("; req/s:")
		for i := range p.Rounds {
			fmt.Fprintf(&b, " %s", ratio(p.Rounds[i].RPS, a.Rounds[i].RPS))
		}
		b.WriteString(".\n")
	}
	if len(r.LowRate) > 0 {
		fmt.Fprintf(&b, "\n### Latency at %d req/s (open loop) through two real Squid parents\n\n| child | p50 ms | p99 ms | errors |\n|---|---:|---:|---:|\n", *lowRate)
		for _, t := range r.LowRate {
			fmt.Fprintf(&b, "| %s | %.2f | %.2f | %d |\n", t.Target, t.FixedP50ms, t.FixedP99ms, t.Errors)
		}
	}
	b.WriteString(r.goals())
	b.WriteString(r.cacheSection())
	for _, sec := range []struct {
		title string
		rows  []Failover
	}{{"2. Failover: one of three parents SIGKILLed under 200 req/s, restarted later", r.Failover},
		{"3. Fast failover: one of three parents black-holed (SYNs dropped), connect timeout 1s, 200 req/s", r.Blackhole}} {
		fmt.Fprintf(&b, "\n## %s\n\n", sec.title)
		b.WriteString("| child | requests | client errors | >100 ms | outage p99 ms | max ms | live connects to dead parent | requests reaching it while dead | detection ms (no new traffic) | revival ms | traffic after revival |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, f := range sec.rows {
			rev := fmt.Sprintf("%.0f", f.RevivalMs)
			if f.RevivalMs < 0 {
				rev = "n/a"
			}
			fmt.Fprintf(&b, "| %s | %d | %d | %d | %.1f | %.1f | %s | %d | %.0f | %s | %v |\n", f.Child, f.Requests, f.ClientErrors, f.Slow100ms, f.OutageP99ms, f.MaxMs, f.LiveAttempts, f.ReachedDead, f.DetectionMs, rev, f.RevivedTraffic)
		}
	}
	fmt.Fprintf(&b, "\n## 4. Memory with %d idle CONNECT tunnels\n\n| child | RSS idle MiB | RSS with tunnels MiB | KiB per tunnel |\n|---|---:|---:|---:|\n", *tunnels)
	for _, m := range r.Memory {
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %.1f |\n", m.Child, m.BaseMiB, m.RSSMiB, m.PerKiB)
	}
	b.WriteString(r.fleetSection())
	b.WriteString(r.icpSection())
	return b.String()
}

// cacheSection is the hit and miss table, with its goals.
func (r *Results) cacheSection() string {
	if len(r.Cache) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## 5. Cache: the same %d B objects as hits, as cold misses (a new URL each, fetched and stored) and uncacheable (no-store), %d connections, median of %d rounds\n\n| path | req/s | child CPU %% | CPU µs per request | p50 ms | p99 ms | errors |\n|---|---:|---:|---:|---:|---:|---:|\n", *size, *conns, max(1, *rounds))
	by := map[string]*Throughput{}
	for i := range r.Cache {
		t := &r.Cache[i]
		by[t.Target] = t
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.1f | %.2f | %.2f | %d |\n", t.Target, t.RPS, t.CPUPct, t.CPUusPerReq, t.P50ms, t.P99ms, t.Errors)
	}
	row := func(goal, fig string, ok bool) { fmt.Fprintf(&b, "| %s | %s | %v |\n", goal, fig, ok) }
	b.WriteString("\n| goal | figure | met |\n|---|---|---|\n")
	if h, m := by[cachePeerdHit], by[cachePeerdMiss]; h != nil && m != nil && h.CPUusPerReq > 0 {
		q := m.CPUusPerReq / h.CPUusPerReq
		row("peerd hit ≥ 3× cheaper in CPU than a miss via a parent", fmt.Sprintf("%.1f / %.1f µs = %.2f×", m.CPUusPerReq, h.CPUusPerReq, q), q >= 3)
	}
	if h, m := by[cachePeerdHit], by[cachePeerdPass]; h != nil && m != nil && h.CPUusPerReq > 0 {
		q := m.CPUusPerReq / h.CPUusPerReq
		row("(for reference) uncacheable pass-through / hit", fmt.Sprintf("%.1f / %.1f µs = %.2f×", m.CPUusPerReq, h.CPUusPerReq, q), true)
	}
	if h, s := by[cachePeerdHit], by[cacheSquidHit]; h != nil && s != nil && s.CPUusPerReq > 0 {
		q := h.CPUusPerReq / s.CPUusPerReq
		row("peerd hit CPU below Squid's cache_mem hit", fmt.Sprintf("%.1f / %.1f µs = %.2f", h.CPUusPerReq, s.CPUusPerReq, q), q < 1)
		row("peerd hit req/s above Squid's", fmt.Sprintf("%.0f / %.0f = %.2f", h.RPS, s.RPS, h.RPS/s.RPS), h.RPS > s.RPS)
	}
	return b.String()
}

// svg draws throughput (bars) and p99 latency (bars) side by side.
func (r *Results) svg() string {
	var b strings.Builder
	w, h := 720, 300
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`, w, h)
	colors := []string{"#888", "#2a7", "#c63"}
	panel := func(x0 int, title string, val func(Throughput) float64, unit string) {
		max := 0.0
		for _, t := range r.Throughput {
			if v := val(t); v > max {
				max = v
			}
		}
		if max == 0 {
			max = 1
		}
		fmt.Fprintf(&b, `<text x="%d" y="20" font-weight="bold">%s</text>`, x0, title)
		for i, t := range r.Throughput {
			v := val(t)
			bh := int(v / max * 200)
			x := x0 + i*100
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="70" height="%d" fill="%s"/>`, x, 250-bh, bh, colors[i%3])
			fmt.Fprintf(&b, `<text x="%d" y="%d">%.4g %s</text>`, x, 245-bh, v, unit)
			label := strings.TrimPrefix(strings.TrimSuffix(t.Target, " → parent"), "client → ")
			fmt.Fprintf(&b, `<text x="%d" y="268">%s</text>`, x, label)
		}
	}
	panel(20, "keep-alive GET throughput (req/s)", func(t Throughput) float64 { return t.RPS }, "")
	panel(380, "p99 latency (ms)", func(t Throughput) float64 { return t.P99ms }, "")
	b.WriteString(`</svg>`)
	return b.String()
}

// ------------------------------------------------------------- machinery

func machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				cpu = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	return fmt.Sprintf("%d cores (%s), %s/%s, %s", runtime.NumCPU(), cpu, runtime.GOOS, runtime.GOARCH, runtime.Version())
}

func atsVersion(bin string) string {
	if bin == "" {
		return "not installed"
	}
	out, _ := exec.Command(bin, "-V").CombinedOutput()
	if m := regexp.MustCompile(`Traffic Server (\S+)`).FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return "unknown"
}

func squidVersion(bin string) string {
	if bin == "" {
		return "not installed"
	}
	out, _ := exec.Command(bin, "-v").Output()
	if m := regexp.MustCompile(`Version (\S+)`).FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return "unknown"
}

// newParent starts an in-process parent answering -size bytes (cache off).
func newParent(name string) *testbed.Parent {
	p, err := testbed.NewParent(name, *size)
	must(err)
	p.SetHeader("Cache-Control", "no-store")
	return p
}

func portOf(addr string) string { _, port, _ := net.SplitHostPort(addr); return port }

// hop is a next hop of a child under test: a loopback parent's name and
// port.
type hop struct{ name, port string }

func hopOf(p *testbed.Parent) hop { return hop{name: p.Name, port: p.Port()} }

func hopsOf(ps []*testbed.Parent) []hop {
	out := make([]hop, len(ps))
	for i, p := range ps {
		out[i] = hopOf(p)
	}
	return out
}

// child is a running child proxy (peerd, squid or ats).
type child struct {
	kind  string
	addr  string
	admin string
	dir   string
	pid   int
	stop  func()
}

func freePort() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	defer ln.Close()
	_, p, _ := net.SplitHostPort(ln.Addr().String())
	return p
}

func waitListening(addr string) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	must(fmt.Errorf("%s not listening after 30s", addr))
}

// startPeerd runs peerd with the given parents.
func startPeerd(work, bin string, parents []hop, extra string) *child {
	dir, _ := os.MkdirTemp(work, "peerd-")
	var b strings.Builder
	fmt.Fprintf(&b, "[proxy]\nlisten = \"127.0.0.1:0\"\nconnect_timeout = \"1s\"\n%s\n[admin]\nlisten = \"127.0.0.1:0\"\n[log]\nlevel = \"info\"\n", extra)
	fmt.Fprintf(&b, "[health]\nprobe_interval = \"1s\"\nprobe_max_interval = \"5s\"\n[selection]\npolicy = \"round-robin\"\n")
	// The memory run tunnels DIRECT to a loopback sink, which the default
	// destination policy refuses.
	b.WriteString("[access]\ndeny_to_local = false\nconnect_ports = [\"1-65535\"]\n")
	for _, p := range parents {
		fmt.Fprintf(&b, "[[peer]]\nname = %q\nhost = \"127.0.0.1\"\nport = %s\n", p.name, p.port)
	}
	var env []string
	if *threads > 0 {
		env = append(env, fmt.Sprintf("GOMAXPROCS=%d", *threads))
	}
	pd, err := testbed.StartPeerd(bin, dir, b.String(), env...)
	must(err)
	return &child{kind: "peerd", addr: pd.Proxy, admin: pd.Admin, dir: dir, pid: pd.Cmd.Process.Pid, stop: pd.Stop}
}

// startSquid runs Squid as the child with the given parents (round-robin,
// no caching), or direct when parents is empty.
func startSquid(work, bin string, parents []hop) *child {
	dir, _ := os.MkdirTemp(work, "squid-")
	var b strings.Builder
	b.WriteString("cache deny all\nconnect_timeout 1 seconds\npeer_connect_timeout 1 seconds\n")
	if len(parents) == 0 {
		b.WriteString("always_direct allow all\n")
	} else {
		b.WriteString("never_direct allow all\n")
		for _, p := range parents {
			fmt.Fprintf(&b, "cache_peer 127.0.0.1 parent %s 0 no-query no-digest round-robin name=%s\n", p.port, p.name)
		}
	}
	sq, err := testbed.StartSquid(bin, dir, testbed.SquidOptions{Name: "squid-" + filepath.Base(dir), Extra: b.String(), NoAccessLog: true})
	must(err)
	return &child{kind: "squid", addr: sq.Addr, dir: dir, pid: sq.Pid(), stop: sq.Kill}
}

// atsThreads is ATS's thread setting: its own default (one exec thread
// per core) unless -threads says otherwise.
func atsThreads() string {
	if *threads <= 0 {
		return "CONFIG proxy.config.exec_thread.autoconfig INT 1\nCONFIG proxy.config.exec_thread.autoconfig.scale FLOAT 1.0\n"
	}
	return fmt.Sprintf("CONFIG proxy.config.exec_thread.autoconfig INT 0\nCONFIG proxy.config.exec_thread.limit INT %d\n", *threads)
}

// startATS runs Apache Traffic Server as the child: a forward proxy with
// its cache off, every request to the given parents (round-robin), in a
// private runroot so it touches nothing of the system's.
func startATS(work, bin string, parents []hop) *child {
	dir, _ := os.MkdirTemp(work, "ats-")
	for _, d := range []string{"etc", "run", "log", "cache"} {
		must(os.MkdirAll(filepath.Join(dir, d), 0o777))
	}
	port := freePort()
	files := map[string]string{
		"runroot.yaml": fmt.Sprintf("prefix: /usr\nexec_prefix: /usr\nbindir: /usr/bin\nsbindir: /usr/sbin\nsysconfdir: %[1]s/etc\n"+
			"datadir: %[1]s/cache\nincludedir: /usr/include\nlibdir: /usr/lib/trafficserver\nlibexecdir: /usr/lib/trafficserver/modules\n"+
			"localstatedir: %[1]s/run\nruntimedir: %[1]s/run\nlogdir: %[1]s/log\ncachedir: %[1]s/cache\n", dir),
		"etc/records.config": "CONFIG proxy.config.http.server_ports STRING " + port + "\n" + `CONFIG proxy.config.admin.user_id STRING #-1
CONFIG proxy.config.http.cache.http INT 0
CONFIG proxy.config.url_remap.remap_required INT 0
CONFIG proxy.config.reverse_proxy.enabled INT 0
CONFIG proxy.config.http.no_dns_just_forward_to_parent INT 1
CONFIG proxy.config.http.uncacheable_requests_bypass_parent INT 0
CONFIG proxy.config.http.parent_proxy.self_detect INT 0
CONFIG proxy.config.http.connect_attempts_timeout INT 1
` + atsThreads() + `CONFIG proxy.config.accept_threads INT 0
CONFIG proxy.config.log.logging_enabled INT 0
CONFIG proxy.config.diags.debug.enabled INT 0
CONFIG proxy.config.cache.ram_cache.size INT 8388608
`,
		"etc/storage.config": dir + "/cache 64M\n",
		"etc/remap.config":   "\n",
		"etc/ip_allow.yaml":  "ip_allow:\n  - apply: in\n    ip_addrs: 0/0\n    action: allow\n    methods: ALL\n  - apply: in\n    ip_addrs: ::/0\n    action: allow\n    methods: ALL\n",
		"etc/plugin.config":  "\n",
		"etc/logging.yaml":   "logging: {}\n",
	}
	var ps []string
	for _, p := range parents {
		ps = append(ps, "127.0.0.1:"+p.port)
	}
	files["etc/parent.config"] = fmt.Sprintf("dest_domain=. parent=%q round_robin=strict go_direct=false\n", strings.Join(ps, ";"))
	for _, f := range []string{"hosting.config", "volume.config", "cache.config", "sni.yaml", "socks.config", "splitdns.config", "ssl_multicert.config", "strategies.yaml"} {
		files["etc/"+f] = ""
	}
	for name, body := range files {
		must(os.WriteFile(filepath.Join(dir, name), []byte(body), 0o666))
	}
	logf, _ := os.Create(filepath.Join(dir, "stderr.log"))
	cmd := exec.Command(bin, "--run-root="+filepath.Join(dir, "runroot.yaml"))
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	must(cmd.Start())
	c := &child{kind: "ats", addr: "127.0.0.1:" + port, dir: dir, pid: cmd.Process.Pid, stop: func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
	}}
	waitListening(c.addr)
	return c
}

// ---------------------------------------------------------- 1. throughput

// The throughput targets, by name.
const (
	targetDirect = "client → parent (direct)"
	targetPeerd  = "client → peerd → parent"
	targetSquid  = "client → squid → parent"
	targetATS    = "client → ats → parent"
)

func throughput(work, peerdBin, squidBin, atsBin string) []Throughput {
	par := newParent("parent")
	defer par.Close()
	hops := []hop{hopOf(par)}
	targets := []tgt{
		{name: targetDirect},
		{name: targetPeerd, start: func() *child { return startPeerd(work, peerdBin, hops, "") }},
	}
	if squidBin != "" {
		targets = append(targets, tgt{name: targetSquid, start: func() *child { return startSquid(work, squidBin, hops) }})
	}
	if atsBin != "" {
		targets = append(targets, tgt{name: targetATS, start: func() *child { return startATS(work, atsBin, hops) }})
	}
	return runRounds(targets, par.Addr, true)
}

type tgt struct {
	name   string
	start  func() *child // nil: direct to the parent
	unique bool          // every request a new URL (cold cache misses)
}

// runRounds measures each target: rounds are interleaved (every target
// once per round) so that the machine drifting in speed during the run
// affects every target alike; each figure is the median over the rounds.
// fixed adds the open-loop latency run.
func runRounds(targets []tgt, directAddr string, fixed bool) []Throughput {
	runs := make([][]Throughput, len(targets))
	for round := 0; round < max(1, *rounds); round++ {
		for i, t := range targets {
			addr := directAddr
			var c *child
			if t.start != nil {
				c = t.start()
				addr = c.addr
				time.Sleep(300 * time.Millisecond) // first probe verdicts
			}
			// Warm up, then measure, with the child's CPU over the window.
			loadURLs(wrkBin, addr, time.Second, t.unique)
			var before time.Duration
			if c != nil {
				before = testbed.CPU(c.pid)
			}
			r := loadURLs(wrkBin, addr, *duration, t.unique)
			if c != nil {
				used := testbed.CPU(c.pid) - before
				r.CPUPct = 100 * used.Seconds() / duration.Seconds()
				if n := r.RPS * duration.Seconds(); n > 0 {
					r.CPUusPerReq = float64(used) / float64(time.Microsecond) / n
				}
			}
			r.Target = t.name
			if fixed {
				// Latency below saturation: an open-loop run at a fixed rate.
				r.FixedP50ms, r.FixedP99ms, _ = fixedRate(addr, target, *rate, 3*time.Second)
			}
			if c != nil {
				c.stop()
			}
			fmt.Fprintf(os.Stderr, "  round %d %-28s %8.0f req/s  cpu %.0f%% %.1f µs/req  p50 %.2f ms  p99 %.2f ms  errors %d; at %d req/s p50 %.2f p99 %.2f ms\n",
				round+1, t.name, r.RPS, r.CPUPct, r.CPUusPerReq, r.P50ms, r.P99ms, r.Errors, *rate, r.FixedP50ms, r.FixedP99ms)
			runs[i] = append(runs[i], r)
		}
	}
	var out []Throughput
	for i := range targets {
		out = append(out, medianOf(runs[i]))
	}
	return out
}

// cacheRun: hits and misses of the same objects, peerd's memory cache
// beside Squid's cache_mem. Hits: the parent says max-age=3600, so after
// the warm-up every request is answered from memory. Misses: the same
// cacheable objects under URLs never asked before (a cold cache), so each
// is fetched from the parent and stored. Pass: the parent says no-store,
// so each request goes through the cache's checks to the parent and
// nothing is stored.
func cacheRun(work, peerdBin, squidBin string) []Throughput {
	hitPar, missPar := newParent("fresh"), newParent("nostore")
	defer hitPar.Close()
	defer missPar.Close()
	hitPar.SetHeader("Cache-Control", "max-age=3600")
	missPar.SetHeader("Cache-Control", "no-store")
	targets := []tgt{
		{name: cachePeerdHit, start: func() *child { return startPeerd(work, peerdBin, []hop{hopOf(hitPar)}, "") }},
		{name: cachePeerdMiss, start: func() *child { return startPeerd(work, peerdBin, []hop{hopOf(hitPar)}, "") }, unique: true},
		{name: cachePeerdPass, start: func() *child { return startPeerd(work, peerdBin, []hop{hopOf(missPar)}, "") }},
	}
	if squidBin != "" {
		targets = append(targets,
			tgt{name: cacheSquidHit, start: func() *child { return startCachingSquid(work, squidBin, []hop{hopOf(hitPar)}) }},
			tgt{name: cacheSquidMiss, start: func() *child { return startCachingSquid(work, squidBin, []hop{hopOf(hitPar)}) }, unique: true},
			tgt{name: cacheSquidPass, start: func() *child { return startCachingSquid(work, squidBin, []hop{hopOf(missPar)}) }})
	}
	return runRounds(targets, "", false)
}

const (
	cachePeerdHit  = "peerd hit (memory)"
	cachePeerdMiss = "peerd miss via parent, stored"
	cachePeerdPass = "peerd uncacheable via parent"
	cacheSquidHit  = "squid hit (cache_mem)"
	cacheSquidMiss = "squid miss via parent, stored"
	cacheSquidPass = "squid uncacheable via parent"
)

// startCachingSquid is startSquid with its memory cache on, sized as
// peerd's default.
func startCachingSquid(work, bin string, parents []hop) *child {
	dir, _ := os.MkdirTemp(work, "squid-")
	var b strings.Builder
	b.WriteString("cache_mem 256 MB\nmaximum_object_size_in_memory 4 MB\nconnect_timeout 1 seconds\npeer_connect_timeout 1 seconds\nnever_direct allow all\n")
	for _, p := range parents {
		fmt.Fprintf(&b, "cache_peer 127.0.0.1 parent %s 0 no-query no-digest round-robin name=%s\n", p.port, p.name)
	}
	sq, err := testbed.StartSquid(bin, dir, testbed.SquidOptions{Name: "squid-" + filepath.Base(dir), Extra: b.String(), NoAccessLog: true})
	must(err)
	return &child{kind: "squid", addr: sq.Addr, dir: dir, pid: sq.Pid(), stop: sq.Kill}
}

// medianOf takes each figure's median over rounds (errors add up).
func medianOf(rs []Throughput) Throughput {
	med := func(f func(Throughput) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		sort.Float64s(v)
		n := len(v)
		if n%2 == 1 {
			return v[n/2]
		}
		return (v[n/2-1] + v[n/2]) / 2
	}
	out := Throughput{Target: rs[0].Target, Rounds: rs}
	out.RPS = med(func(t Throughput) float64 { return t.RPS })
	out.P50ms = med(func(t Throughput) float64 { return t.P50ms })
	out.P99ms = med(func(t Throughput) float64 { return t.P99ms })
	out.FixedP50ms = med(func(t Throughput) float64 { return t.FixedP50ms })
	out.FixedP99ms = med(func(t Throughput) float64 { return t.FixedP99ms })
	out.CPUPct = med(func(t Throughput) float64 { return t.CPUPct })
	out.CPUusPerReq = med(func(t Throughput) float64 { return t.CPUusPerReq })
	for _, r := range rs {
		out.Errors += r.Errors
	}
	return out
}

// lowRateRun: latency below saturation through two real Squid parents
// (which fetch from a local origin), with peerd, Squid and ATS as the
// child in turn.
func lowRateRun(work, peerdBin, squidBin, atsBin string) []Throughput {
	origin := newParent("origin")
	defer origin.Close()
	sp1, sp2 := startSquid(work, squidBin, nil), startSquid(work, squidBin, nil)
	defer sp1.stop()
	defer sp2.stop()
	hops := []hop{{name: "sq1", port: portOf(sp1.addr)}, {name: "sq2", port: portOf(sp2.addr)}}
	// A name, not an address: ATS routes only names to parents here
	// (dest_domain), and the Squid parents resolve localhost from
	// /etc/hosts.
	u := "http://localhost:" + origin.Port() + "/obj"
	kinds := []struct {
		name  string
		start func() *child
	}{
		{"peerd", func() *child { return startPeerd(work, peerdBin, hops, "") }},
		{"squid", func() *child { return startSquid(work, squidBin, hops) }},
	}
	if atsBin != "" {
		kinds = append(kinds, struct {
			name  string
			start func() *child
		}{"ats", func() *child { return startATS(work, atsBin, hops) }})
	}
	var out []Throughput
	for _, k := range kinds {
		c := k.start()
		time.Sleep(300 * time.Millisecond)
		fixedRate(c.addr, u, *lowRate, time.Second) // warm
		r := Throughput{Target: k.name}
		r.FixedP50ms, r.FixedP99ms, r.Errors = fixedRate(c.addr, u, *lowRate, 5*time.Second)
		c.stop()
		fmt.Fprintf(os.Stderr, "  %-6s p50 %.2f ms  p99 %.2f ms  errors %d\n", k.name, r.FixedP50ms, r.FixedP99ms, r.Errors)
		out = append(out, r)
	}
	return out
}

// goals checks issue 11's figures, all from this one run.
func (r *Results) goals() string {
	p, s, a := r.tp(targetPeerd), r.tp(targetSquid), r.tp(targetATS)
	if p == nil || s == nil || a == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n### Goals (same run)\n\n| goal | figure | met |\n|---|---|---|\n")
	row := func(goal, fig string, ok bool) { fmt.Fprintf(&b, "| %s | %s | %v |\n", goal, fig, ok) }
	if a.CPUusPerReq > 0 {
		q := p.CPUusPerReq / a.CPUusPerReq
		row("peerd CPU per request ≤ 0.5 × ATS", fmt.Sprintf("%.1f / %.1f µs = %.2f", p.CPUusPerReq, a.CPUusPerReq, q), q <= 0.5)
	}
	if a.RPS > 0 {
		q := p.RPS / a.RPS
		row("peerd req/s ≥ 1.3 × ATS", fmt.Sprintf("%.0f / %.0f = %.2f", p.RPS, a.RPS, q), q >= 1.3)
	}
	worst := min(s.FixedP99ms, a.FixedP99ms)
	row(fmt.Sprintf("peerd p99 at %d req/s ≤ both anchors", *rate), fmt.Sprintf("%.2f ms (squid %.2f, ats %.2f)", p.FixedP99ms, s.FixedP99ms, a.FixedP99ms), p.FixedP99ms <= worst)
	var lp, ls *Throughput
	for i := range r.LowRate {
		switch r.LowRate[i].Target {
		case "peerd":
			lp = &r.LowRate[i]
		case "squid":
			ls = &r.LowRate[i]
		}
	}
	if lp != nil && ls != nil {
		row(fmt.Sprintf("peerd p50 at %d req/s via Squid parents ≤ Squid's", *lowRate), fmt.Sprintf("%.2f ms (squid %.2f)", lp.FixedP50ms, ls.FixedP50ms), lp.FixedP50ms <= ls.FixedP50ms)
	}
	return b.String()
}

const target = "http://origin.bench/obj"

// loadURLs drives addr for d; unique makes every request's URL one not asked
// before (a cold cache: each is a miss, fetched and stored).
func loadURLs(wrkBin, addr string, d time.Duration, unique bool) Throughput {
	if wrkBin != "" {
		return wrkLoad(wrkBin, addr, d, unique)
	}
	return goLoad(addr, d, unique)
}

// wrkLoad drives addr with wrk, sending absolute-URI requests so that the
// proxy (or the parent, which accepts them too) is addressed as a proxy.
func wrkLoad(bin, addr string, d time.Duration, unique bool) Throughput {
	script := filepath.Join(os.TempDir(), "peerd-bench.lua")
	lua := fmt.Sprintf("wrk.path = %q\nwrk.headers[\"Host\"] = \"origin.bench\"\n", target)
	if unique {
		// Each wrk thread has its own Lua state: a random prefix per
		// thread keeps their URLs apart.
		lua = fmt.Sprintf(`math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))
local prefix, n = math.random(1, 2^30), 0
request = function()
  n = n + 1
  return wrk.format("GET", %q .. "?" .. prefix .. "-" .. n, {["Host"] = "origin.bench"})
end
`, target)
	}
	os.WriteFile(script, []byte(lua), 0o644)
	out, err := exec.Command(bin, "-t2", fmt.Sprintf("-c%d", *conns), fmt.Sprintf("-d%ds", int(d.Seconds())), "--latency", "-s", script, "http://"+addr+"/").CombinedOutput()
	must(err)
	s := string(out)
	r := Throughput{}
	if m := regexp.MustCompile(`Requests/sec:\s+([\d.]+)`).FindStringSubmatch(s); m != nil {
		r.RPS, _ = strconv.ParseFloat(m[1], 64)
	}
	r.P50ms = wrkPct(s, "50%")
	r.P99ms = wrkPct(s, "99%")
	if m := regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`).FindStringSubmatch(s); m != nil {
		r.Errors, _ = strconv.Atoi(m[1])
	}
	if m := regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`).FindStringSubmatch(s); m != nil {
		for _, x := range m[1:] {
			n, _ := strconv.Atoi(x)
			r.Errors += n
		}
	}
	return r
}

func wrkPct(s, pct string) float64 {
	m := regexp.MustCompile(`\s` + regexp.QuoteMeta(pct) + `\s+([\d.]+)(us|ms|s)`).FindStringSubmatch(s)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	switch m[2] {
	case "us":
		return v / 1000
	case "s":
		return v * 1000
	}
	return v
}

func proxyClient(addr string, timeout time.Duration) *http.Client {
	u, _ := url.Parse("http://" + addr)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), MaxIdleConnsPerHost: 256, DisableCompression: true}, Timeout: timeout}
}

// goLoad is a closed-loop generator: *conns workers for d; unique as in
// loadURLs.
func goLoad(addr string, d time.Duration, unique bool) Throughput {
	c := proxyClient(addr, 10*time.Second)
	var mu sync.Mutex
	var lat []time.Duration
	errs := 0
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	var seq atomic.Int64
	for w := 0; w < *conns; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				u := target
				if unique {
					u = fmt.Sprintf("%s?go-%d-%d", target, time.Now().UnixNano(), seq.Add(1))
				}
				t0 := time.Now()
				ok := getOK(c, u)
				mu.Lock()
				if ok {
					lat = append(lat, time.Since(t0))
				} else {
					errs++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return Throughput{RPS: float64(len(lat)) / d.Seconds(), P50ms: pctMs(lat, 0.5), P99ms: pctMs(lat, 0.99), Errors: errs}
}

// fixedRate sends rps requests per second for d (open loop: a slow answer
// does not delay the next request) and returns p50 and p99 latency.
func fixedRate(addr, target string, rps int, d time.Duration) (p50, p99 float64, errs int) {
	c := proxyClient(addr, 10*time.Second)
	defer c.CloseIdleConnections()
	n := int(d.Seconds() * float64(rps))
	lat := make([]time.Duration, n)
	tick := time.NewTicker(time.Second / time.Duration(rps))
	defer tick.Stop()
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		<-tick.C
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			t0 := time.Now()
			resp, err := c.Get(target)
			if err != nil {
				lat[i] = time.Hour
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			lat[i] = time.Since(t0)
			if resp.StatusCode != 200 {
				lat[i] = time.Hour
			}
		}(i)
	}
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	for _, l := range lat {
		if l == time.Hour {
			errs++
		}
	}
	return pctMs(lat, 0.5), pctMs(lat, 0.99), errs
}

// getOK GETs u through c, reads the body to the end and reports a 200.
func getOK(c *http.Client, u string) bool {
	resp, err := c.Get(u)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == 200
}

func pctMs(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return float64(sorted[i]) / float64(time.Millisecond)
}

// ------------------------------------------------------------ 2. failover

type sample struct {
	at  time.Time
	lat time.Duration
	ok  bool
}

// failover runs 200 req/s through a child with three parents; at 2s one
// parent is killed (or black-holed), at 6s it comes back; the run ends at
// 10s (plus up to 5s for a revival verdict).
func failover(work, kind, peerdBin, squidBin, how string) Failover {
	ps := []*testbed.Parent{newParent("p1"), newParent("p2"), newParent("p3")}
	defer func() {
		for _, p := range ps {
			p.Close()
		}
	}()
	var c *child
	if kind == "peerd" {
		c = startPeerd(work, peerdBin, hopsOf(ps), "")
		time.Sleep(300 * time.Millisecond)
	} else {
		c = startSquid(work, squidBin, hopsOf(ps))
		time.Sleep(500 * time.Millisecond)
	}
	defer c.stop()
	victim := ps[0]
	cl := proxyClient(c.addr, 15*time.Second)
	var mu sync.Mutex
	var samples []sample
	var wg sync.WaitGroup
	const rate = 200
	total := 10 * rate
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	t0 := time.Now()
	var killedAt, backAt time.Time
	f := Failover{Child: kind, Scenario: how, LiveAttempts: "n/a", RevivalMs: -1}
	var detectedAt, revivedAt, lastUnhealthy time.Time
	var phaseMu sync.Mutex
	// peerd: detection is the moment the victim stops getting new traffic
	// (suspect or dead); revival the moment it is alive and healthy again.
	// Polled every 5ms; the gap is allowed for below.
	const pollEvery = 5 * time.Millisecond
	pollDone := make(chan struct{})
	pollStop := make(chan struct{})
	go func() {
		defer close(pollDone)
		if kind != "peerd" {
			return
		}
		for {
			select {
			case <-pollStop:
				return
			case <-time.After(pollEvery):
			}
			phaseMu.Lock()
			k, b := killedAt, backAt
			phaseMu.Unlock()
			if k.IsZero() {
				continue
			}
			sent := time.Now()
			st, suspect := peerState(c.admin, victim.Name)
			now := time.Now()
			phaseMu.Lock()
			unhealthy := st == "dead" || suspect
			if detectedAt.IsZero() && unhealthy {
				detectedAt = now
			}
			if !b.IsZero() && unhealthy {
				// After the restart the victim only gets healthier, so it
				// was held dead/suspect all along until this query was sent.
				lastUnhealthy = sent
			}
			if !b.IsZero() && revivedAt.IsZero() && st == "alive" && !suspect {
				revivedAt = now
			}
			done := !revivedAt.IsZero()
			phaseMu.Unlock()
			if done {
				return
			}
		}
	}()
	var beforeBack int64
	for i := 0; i < total; i++ {
		<-tick.C
		el := time.Since(t0)
		if killedAt.IsZero() && el >= 2*time.Second {
			if how == "kill" {
				victim.Kill()
			} else {
				must(victim.Blackhole())
			}
			phaseMu.Lock()
			killedAt = time.Now()
			phaseMu.Unlock()
		}
		if backAt.IsZero() && el >= 6*time.Second {
			beforeBack = victim.Requests()
			must(victim.Restart())
			phaseMu.Lock()
			backAt = time.Now()
			phaseMu.Unlock()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := sample{at: time.Now()}
			s.ok = getOK(cl, target)
			s.lat = time.Since(s.at)
			mu.Lock()
			samples = append(samples, s)
			mu.Unlock()
		}()
	}
	wg.Wait()
	// Wait (bounded) for a revival verdict.
	select {
	case <-pollDone:
	case <-time.After(5 * time.Second):
	}
	close(pollStop)
	<-pollDone
	phaseMu.Lock()
	defer phaseMu.Unlock()
	if kind == "squid" {
		detectedAt, revivedAt = squidTimes(filepath.Join(c.dir, "cache.log"), victim.Name, killedAt, backAt)
	}
	afterBack := victim.Requests() - beforeBack
	if !revivedAt.IsZero() {
		f.RevivalMs = float64(revivedAt.Sub(backAt)) / float64(time.Millisecond)
		// Requests the restarted parent got while the child still held it
		// dead or suspect: for peerd, before the last query that still saw
		// it so; for Squid, before the second of its REVIVED log line
		// (1s resolution, so a lower bound).
		cut := lastUnhealthy
		if kind == "squid" {
			cut = revivedAt
		}
		f.ReachedDead = victim.ArrivalsBefore(cut)
	}
	f.RevivedTraffic = afterBack > 0
	if !detectedAt.IsZero() {
		f.DetectionMs = float64(detectedAt.Sub(killedAt)) / float64(time.Millisecond)
	}
	var outage []time.Duration
	for _, s := range samples {
		f.Requests++
		if !s.ok {
			f.ClientErrors++
		}
		if s.lat > 100*time.Millisecond {
			f.Slow100ms++
		}
		f.MaxMs = max(f.MaxMs, float64(s.lat)/float64(time.Millisecond))
		if !s.at.Before(killedAt) && s.at.Before(backAt) {
			outage = append(outage, s.lat)
		}
	}
	sort.Slice(outage, func(i, j int) bool { return outage[i] < outage[j] })
	f.OutageP99ms = pctMs(outage, 0.99)
	if kind == "peerd" {
		var st struct {
			ConnectFailures int `json:"connect_failures_total"`
			ProbeFailures   int `json:"probe_failures_total"`
		}
		getJSON("http://"+c.admin+"/peers/"+victim.Name, &st)
		f.LiveAttempts = strconv.Itoa(st.ConnectFailures - st.ProbeFailures)
	}
	fmt.Fprintf(os.Stderr, "  %-6s %-9s errors %d, >100ms %d, outage p99 %.1f ms, live connects to dead %s, detect %.0f ms, revive %.0f ms\n",
		kind, how, f.ClientErrors, f.Slow100ms, f.OutageP99ms, f.LiveAttempts, f.DetectionMs, f.RevivalMs)
	return f
}

func peerState(admin, name string) (string, bool) {
	var st struct {
		State   string `json:"state"`
		Suspect bool   `json:"suspect"`
	}
	getJSON("http://"+admin+"/peers/"+name, &st)
	return st.State, st.Suspect
}

func getJSON(u string, v any) {
	resp, err := http.Get(u)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	json.NewDecoder(resp.Body).Decode(v)
}

// squidTimes reads Squid's DEAD/REVIVED lines for the peer from cache.log.
func squidTimes(path, name string, killed, back time.Time) (dead, revived time.Time) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if len(l) < 19 {
			continue
		}
		ts, err := time.ParseInLocation("2006/01/02 15:04:05", l[:19], time.Local)
		if err != nil {
			continue
		}
		// Second resolution: a death is no later than the end of its
		// second, a revival no earlier than its start.
		switch {
		case strings.Contains(l, "Detected DEAD Parent: "+name) && dead.IsZero() && ts.After(killed.Add(-time.Second)):
			dead = ts.Add(time.Second)
		case strings.Contains(l, "Detected REVIVED Parent: "+name) && revived.IsZero() && ts.After(back.Add(-time.Second)):
			revived = ts
		}
	}
	return
}

// -------------------------------------------------------------- 3. memory

// memory opens idle CONNECT tunnels through the child (direct to a local
// sink that accepts and holds) and reads the child's RSS.
func memory(work, kind, peerdBin, squidBin string) Memory {
	sink, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	defer sink.Close()
	var held sync.Map
	go func() {
		for {
			c, err := sink.Accept()
			if err != nil {
				return
			}
			held.Store(c, true)
		}
	}()
	var c *child
	if kind == "peerd" {
		c = startPeerd(work, peerdBin, nil, "")
	} else {
		c = startSquid(work, squidBin, nil)
	}
	defer c.stop()
	time.Sleep(300 * time.Millisecond)
	m := Memory{Child: kind, Tunnels: *tunnels, BaseMiB: testbed.RSSMiB(c.pid)}
	var clients []net.Conn
	defer func() {
		for _, cl := range clients {
			cl.Close()
		}
		held.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	open := 0
	for i := 0; i < *tunnels && ctx.Err() == nil; i++ {
		var d net.Dialer
		cl, err := d.DialContext(ctx, "tcp", c.addr)
		if err != nil {
			break
		}
		fmt.Fprintf(cl, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", sink.Addr(), sink.Addr())
		cl.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(cl), nil)
		if err != nil || resp.StatusCode != 200 {
			cl.Close()
			break
		}
		cl.SetReadDeadline(time.Time{})
		clients = append(clients, cl)
		open++
	}
	time.Sleep(time.Second)
	runtime.GC()
	m.Tunnels = open
	m.RSSMiB = testbed.RSSMiB(c.pid)
	if open > 0 {
		m.PerKiB = (m.RSSMiB - m.BaseMiB) * 1024 / float64(open)
	}
	fmt.Fprintf(os.Stderr, "  %-6s %d tunnels: RSS %.1f -> %.1f MiB (%.1f KiB each)\n", kind, open, m.BaseMiB, m.RSSMiB, m.PerKiB)
	return m
}
