package main

// This file holds section 1, throughput: interleaved rounds against
// peerd, ATS and Squid (and direct), the cache rows, the low-rate rows,
// and the goals (the load generators are in load.go).

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/peerd/peerd/internal/testbed"
)

// The throughput targets, by name.
const (
	targetDirect = "client → parent (direct)"
	targetPeerd  = "client → peerd → parent"
	// peerd with GOMAXPROCS set to one per core (-fixedthreads), beside
	// the default, which sizes its threads to the load (internal/procs).
	targetPeerdFixed = "client → peerd, fixed threads → parent"
	// peerd exporting traces of 1 % of requests to a collector (a sink
	// on loopback): the cost of tracing.
	targetPeerdTraced = "client → peerd, traced 1 % → parent"
	targetSquid       = "client → squid → parent"
	targetATS         = "client → ats → parent"
	// The floors (bench/floor): the least a Go proxy does per request in
	// peerd's I/O model and in an event loop's; references, not products.
	targetFloorG = "client → Go floor, goroutines → parent"
	targetFloorE = "client → Go floor, epoll → parent"
)

func throughput(work, peerdBin, squidBin, atsBin string) []Throughput {
	par := newParent("parent")
	defer par.Close()
	hops := []hop{hopOf(par)}
	targets := []tgt{
		{name: targetDirect},
		{name: targetPeerd, start: func() *child { return startPeerd(work, peerdBin, hops, "") }},
	}
	if *baseBin != "" {
		targets = append(targets, tgt{name: targetPeerd + " (" + *baseBin + ")", start: func() *child { return startPeerd(work, *baseBin, hops, "") }})
	}
	sink := startSpanSink()
	defer sink.Close()
	traced := fmt.Sprintf("[trace]\notlp_endpoint = \"http://%s\"\nsample = 0.01\n", sink.Addr)
	targets = append(targets, tgt{name: targetPeerdTraced, start: func() *child { return startPeerd(work, peerdBin, hops, "\n"+traced) }})
	if *fixedThreads {
		n := runtime.NumCPU()
		targets = append(targets, tgt{name: targetPeerdFixed, start: func() *child { return startPeerdThreads(work, peerdBin, hops, "", "", n) }})
	}
	if squidBin != "" {
		targets = append(targets, tgt{name: targetSquid, start: func() *child { return startSquid(work, squidBin, hops) }})
	}
	if atsBin != "" {
		targets = append(targets, tgt{name: targetATS, start: func() *child { return startATS(work, atsBin, hops) }})
	}
	floorBin := filepath.Join(work, "floor")
	build := exec.Command("go", "build", "-o", floorBin, "./bench/floor")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	must(build.Run())
	for _, loop := range []struct{ name, mode string }{{targetFloorG, "goroutine"}, {targetFloorE, "epoll"}} {
		targets = append(targets, tgt{name: loop.name, start: func() *child { return startFloor(floorBin, loop.mode, par.Addr) }})
	}
	rows := runRounds(targets, par.Addr, true)
	fmt.Fprintf(os.Stderr, "   the span sink received %d batches of spans\n", sink.posts.Load())
	return rows
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
				pinChild(c)
				addr = c.addr
				time.Sleep(300 * time.Millisecond) // first probe verdicts
			}
			// Warm up, then measure, with the child's CPU over the window.
			loadURLs(wrkBin, addr, time.Second, t.unique)
			var userBefore, kernelBefore time.Duration
			if c != nil {
				userBefore, kernelBefore = testbed.CPUSplit(c.pid)
			}
			r := loadURLs(wrkBin, addr, *duration, t.unique)
			if c != nil {
				u, k := testbed.CPUSplit(c.pid)
				user, used := u-userBefore, u-userBefore+k-kernelBefore
				r.CPUPct = 100 * used.Seconds() / duration.Seconds()
				if n := r.RPS * duration.Seconds(); n > 0 {
					r.CPUusPerReq = float64(used) / float64(time.Microsecond) / n
					r.CPUUserUsPerReq = float64(user) / float64(time.Microsecond) / n
				}
			}
			r.Target = t.name
			if fixed {
				// Latency below saturation: an open-loop run at a fixed rate.
				var before time.Duration
				if c != nil {
					before = testbed.CPU(c.pid)
				}
				window := *fixedFor
				r.FixedP50ms, r.FixedP99ms, _, r.FixedSentRPS = fixedRate(addr, target, *rate, window)
				if c != nil {
					r.FixedCPUusPerReq = float64(testbed.CPU(c.pid)-before) / float64(time.Microsecond) / (window.Seconds() * float64(*rate))
				}
			}
			if c != nil {
				c.stop()
			}
			fmt.Fprintf(os.Stderr, "  round %d %-28s %8.0f req/s  cpu %.0f%% %.1f µs/req  p50 %.2f ms  p99 %.2f ms  errors %d; at %d req/s (sent at %.0f) p50 %.2f p99 %.2f ms %.1f µs/req\n",
				round+1, t.name, r.RPS, r.CPUPct, r.CPUusPerReq, r.P50ms, r.P99ms, r.Errors, *rate, r.FixedSentRPS, r.FixedP50ms, r.FixedP99ms, r.FixedCPUusPerReq)
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
	out.CPUUserUsPerReq = med(func(t Throughput) float64 { return t.CPUUserUsPerReq })
	out.FixedCPUusPerReq = med(func(t Throughput) float64 { return t.FixedCPUusPerReq })
	out.FixedSentRPS = med(func(t Throughput) float64 { return t.FixedSentRPS })
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
		r.FixedP50ms, r.FixedP99ms, r.Errors, r.FixedSentRPS = fixedRate(c.addr, u, *lowRate, 5*time.Second)
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
		row("peerd CPU per request ≤ 0.65 × ATS", fmt.Sprintf("%.1f / %.1f µs = %.2f", p.CPUusPerReq, a.CPUusPerReq, q), q <= 0.65)
	}
	if a.RPS > 0 {
		q := p.RPS / a.RPS
		row("peerd req/s ≥ 1.15 × ATS", fmt.Sprintf("%.0f / %.0f = %.2f", p.RPS, a.RPS, q), q >= 1.15)
	}
	if g := r.tp(targetFloorG); g != nil && g.CPUusPerReq > 0 {
		q := p.CPUusPerReq / g.CPUusPerReq
		row("peerd CPU per request ≤ 1.0 × the goroutine floor", fmt.Sprintf("%.1f / %.1f µs = %.2f", p.CPUusPerReq, g.CPUusPerReq, q), q <= 1.0)
	}
	if a.FixedCPUusPerReq > 0 {
		q := p.FixedCPUusPerReq / a.FixedCPUusPerReq
		row(fmt.Sprintf("peerd CPU per request at %d req/s ≤ 0.6 × ATS", *rate), fmt.Sprintf("%.1f / %.1f µs = %.2f", p.FixedCPUusPerReq, a.FixedCPUusPerReq, q), q <= 0.6)
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
	if g, e := r.tp(targetFloorG), r.tp(targetFloorE); g != nil && e != nil && a.CPUusPerReq > 0 && g.CPUusPerReq > 0 {
		fmt.Fprintf(&b, "\nThe floors (bench/floor), CPU per request at saturation: goroutine per connection %.1f µs = %.2f × ATS; one epoll loop %.1f µs = %.2f × ATS. peerd is %.2f × the goroutine floor.\n",
			g.CPUusPerReq, g.CPUusPerReq/a.CPUusPerReq, e.CPUusPerReq, e.CPUusPerReq/a.CPUusPerReq, p.CPUusPerReq/g.CPUusPerReq)
		b.WriteString("\nThe same, split into user space + kernel, µs per request:")
		for _, c := range []struct {
			name string
			t    *Throughput
		}{{"peerd", p}, {"goroutine floor", g}, {"epoll floor", e}, {"ATS", a}} {
			fmt.Fprintf(&b, " %s %.1f + %.1f;", c.name, c.t.CPUUserUsPerReq, c.t.CPUusPerReq-c.t.CPUUserUsPerReq)
		}
		b.WriteString("\n")
	}
	return b.String()
}

const target = "http://origin.bench/obj"
