package main

// This file holds the benchmark results and how they are written: the
// markdown tables, the goals met or not, and the SVG chart.

import (
	"fmt"
	"strings"
)

type Results struct {
	When        string        `json:"when"`
	Machine     string        `json:"machine"`
	Squid       string        `json:"squid"`
	ATS         string        `json:"ats"`
	Loader      string        `json:"loader"`
	Seconds     float64       `json:"seconds"`
	Throughput  []Throughput  `json:"throughput"`
	LowRate     []Throughput  `json:"low_rate_via_squid_parents"`
	Failover    []Failover    `json:"failover"`
	Blackhole   []Failover    `json:"blackhole"`
	Memory      []Memory      `json:"memory"`
	Connections []ConnRow     `json:"connections,omitempty"`
	Cache       []Throughput  `json:"cache"`
	Fleet       []FleetRow    `json:"fleet"`
	ICP         []ICPRow      `json:"icp"`
	Gray        []GrayRow     `json:"gray"`
	Relative    []RelativeRow `json:"relative_latency,omitempty"`
	Beyond      []BeyondRow   `json:"beyond_the_door,omitempty"`
	BeyondMem   []BeyondMem   `json:"beyond_memory,omitempty"`
	// RelativeLoad is three equal parents on a busy host (relload).
	RelativeLoad *RelativeLoadRow   `json:"relative_loaded_host,omitempty"`
	Shared       []SharedRow        `json:"shared_cache,omitempty"`
	TLS          []Throughput       `json:"tls_parent"`
	Auth         []Throughput       `json:"basic_auth"`
	Disk         *DiskResults       `json:"disk_cache,omitempty"`
	Tunnel       []TunnelRow        `json:"connect_tunnels,omitempty"`
	HitRatio     *HitRatios         `json:"hit_ratios,omitempty"`
	Optimum      *Optimum           `json:"optimum,omitempty"`
	Scale        []ScaleRow         `json:"scale,omitempty"`
	SmallStore   *SmallStoreResults `json:"small_store,omitempty"`
	Cost         []CostRow          `json:"cost,omitempty"`
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
	// FixedCPUusPerReq is the child's CPU per request over the fixed-rate
	// run (0: not measured).
	FixedCPUusPerReq float64 `json:"fixed_rate_cpu_us_per_req"`
	// FixedSentRPS is the rate the fixed-rate run's requests were sent at.
	FixedSentRPS float64 `json:"fixed_rate_sent_rps"`
	// CPU of the child process over the loaded window: share of one core,
	// and microseconds per request (0: not measured, e.g. direct).
	CPUPct      float64 `json:"child_cpu_pct"`
	CPUusPerReq float64 `json:"child_cpu_us_per_request"`
	// CPUUserUsPerReq is the part of CPUusPerReq spent in user space; the
	// rest is the kernel's (system calls, and the loopback TCP work they
	// do for the receiving end).
	CPUUserUsPerReq float64 `json:"child_cpu_user_us_per_request"`
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
	fmt.Fprintf(&b, "| path | req/s | child CPU %% | CPU µs per request | p50 ms | p99 ms | errors | p50 ms at %d req/s | p99 ms at %d req/s | CPU µs per request at %d req/s |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", *rate, *rate, *rate)
	for _, t := range r.Throughput {
		cpu, per, fixed := "n/a", "n/a", "n/a"
		if t.CPUusPerReq > 0 {
			cpu, per = fmt.Sprintf("%.0f", t.CPUPct), fmt.Sprintf("%.1f", t.CPUusPerReq)
		}
		if t.FixedCPUusPerReq > 0 {
			fixed = fmt.Sprintf("%.1f", t.FixedCPUusPerReq)
		}
		fmt.Fprintf(&b, "| %s | %.0f | %s | %s | %.2f | %.2f | %d | %.2f | %.2f | %s |\n", t.Target, t.RPS, cpu, per, t.P50ms, t.P99ms, t.Errors, t.FixedP50ms, t.FixedP99ms, fixed)
	}
	var sent []string
	for _, t := range r.Throughput {
		if t.FixedSentRPS > 0 {
			sent = append(sent, fmt.Sprintf("%s %.0f", t.Target, t.FixedSentRPS))
		}
	}
	if len(sent) > 0 {
		fmt.Fprintf(&b, "\nThe fixed-rate runs' requests were sent at (req/s): %s.\n", strings.Join(sent, "; "))
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
	if tr := r.tp(targetPeerdTraced); p != nil && tr != nil && p.CPUusPerReq > 0 {
		fmt.Fprintf(&b, "\nTracing 1 %% of requests (spans exported to a collector): CPU per request traced/untraced = %s at saturation",
			ratio(tr.CPUusPerReq, p.CPUusPerReq))
		if p.FixedCPUusPerReq > 0 {
			fmt.Fprintf(&b, ", %s at %d req/s", ratio(tr.FixedCPUusPerReq, p.FixedCPUusPerReq), *rate)
		}
		b.WriteString(" (goal: at most 1.02).\n")
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
	b.WriteString(r.tunnelMarkdown())
	b.WriteString(r.connectionsMarkdown())
	b.WriteString(r.hitRatioMarkdown())
	b.WriteString(r.optimumMarkdown())
	b.WriteString(r.scaleMarkdown())
	b.WriteString(r.cacheSection())
	b.WriteString(r.diskSection())
	b.WriteString(r.smallStoreSection())
	b.WriteString(r.costSection())
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
	b.WriteString(r.sharedSection())
	b.WriteString(r.icpSection())
	b.WriteString(r.graySection())
	b.WriteString(r.relativeSection())
	b.WriteString(r.beyondSection())
	b.WriteString(r.beyondMemSection())
	b.WriteString(r.relativeLoadSection())
	b.WriteString(r.tlsAuthSection())
	return b.String()
}

// throughputTable writes rows as a table (cpu names the CPU column) and
// returns them by target.
func throughputTable(b *strings.Builder, cpu string, rows []Throughput) map[string]*Throughput {
	fmt.Fprintf(b, "| path | req/s | child CPU %% | %s | p50 ms | p99 ms | errors |\n|---|---:|---:|---:|---:|---:|---:|\n", cpu)
	by := map[string]*Throughput{}
	for i := range rows {
		t := &rows[i]
		by[t.Target] = t
		fmt.Fprintf(b, "| %s | %.0f | %.0f | %.1f | %.2f | %.2f | %d |\n", t.Target, t.RPS, t.CPUPct, t.CPUusPerReq, t.P50ms, t.P99ms, t.Errors)
	}
	return by
}

// cacheSection is the hit and miss table, with its goals.
func (r *Results) cacheSection() string {
	if len(r.Cache) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## 5. Cache: the same %d B objects as hits, as cold misses (a new URL each, fetched and stored) and uncacheable (no-store), %d connections, median of %d rounds\n\n", *size, *conns, max(1, *rounds))
	by := throughputTable(&b, "CPU µs per request", r.Cache)
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
