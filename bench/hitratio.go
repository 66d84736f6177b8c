package main

// This file holds the hit-ratio section: a real request trace replayed
// through peerd's memory cache and through Squid's, under each of
// Squid's memory replacement policies, with the same memory at 1, 5 and
// 10 % of the trace's footprint, beside LRU, GDSF and S3-FIFO simulated
// over the same bytes (bench/trace).

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/peerd/peerd/bench/trace"
	"github.com/peerd/peerd/internal/testbed"
)

var (
	tracePath = flag.String("trace", "bench/traces/web12.trace.gz", "the trace of the hitratio section (\"time id size\" or \"seq id\" per line)")
	traceSeed = flag.Uint64("traceseed", 1, "seed of the sizes given to a trace without them")
)

// HitRatioRow is one cache at one memory size.
type HitRatioRow struct {
	Cache     string  `json:"cache"`
	Percent   int     `json:"percent_of_footprint"`
	Memory    int64   `json:"memory_bytes"`
	ObjectHit float64 `json:"object_hit_ratio"`
	ByteHit   float64 `json:"byte_hit_ratio"`
	Wrong     int64   `json:"wrong_answers"`
	Seconds   float64 `json:"seconds,omitempty"`
}

// HitRatios is the section: the trace and its rows.
type HitRatios struct {
	Trace     string        `json:"trace"`
	Sizes     string        `json:"sizes"`
	Requests  int           `json:"requests"`
	Objects   int           `json:"objects"`
	Footprint int64         `json:"footprint_bytes"`
	Rows      []HitRatioRow `json:"rows"`
}

var squidPolicies = []string{"lru", "heap GDSF", "heap LFUDA"}

func hitRatioRun(work, peerdBin, squidBin string) *HitRatios {
	t, err := trace.Open(*tracePath, *traceSeed)
	must(err)
	objects, footprint := t.Footprint()
	out := &HitRatios{Trace: filepath.Base(*tracePath), Requests: len(t.Requests), Objects: objects, Footprint: footprint, Sizes: "the trace's own"}
	if !t.Sized {
		out.Sizes = fmt.Sprintf("log-normal, median 8 KiB, sigma 1.6, at most 16 MiB, seed %d", t.Seed)
	}
	o, err := trace.StartOrigin()
	must(err)
	defer o.Close()
	for _, pct := range []int{1, 5, 10} {
		capacity := footprint * int64(pct) / 100
		for _, p := range trace.Policies(capacity) {
			r := trace.Simulate(p, t)
			out.Rows = append(out.Rows, HitRatioRow{Cache: "simulated " + p.Name(), Percent: pct, Memory: capacity,
				ObjectHit: r.ObjectHitRatio(), ByteHit: r.ByteHitRatio()})
		}
		extra := fmt.Sprintf("[cache]\nmemory = \"%d\"\nmax_object = \"%d\"\n", capacity, capacity)
		pd := startPeerd(work, peerdBin, nil, "direct = \"always\"\n"+extra)
		out.Rows = append(out.Rows, replayRow(t, o, "peerd", pct, capacity, pd))
		if squidBin == "" {
			continue
		}
		for _, pol := range squidPolicies {
			dir, _ := os.MkdirTemp(work, "squid-")
			conf := fmt.Sprintf("always_direct allow all\ncache_mem %d bytes\nmaximum_object_size_in_memory %d bytes\n"+
				"maximum_object_size %d bytes\nmemory_replacement_policy %s\n", capacity, capacity, capacity, pol)
			sq, err := testbed.StartSquid(squidBin, dir, testbed.SquidOptions{Name: "squid-" + filepath.Base(dir), Extra: conf, NoAccessLog: true})
			must(err)
			c := &child{kind: "squid", addr: sq.Addr, dir: dir, pid: sq.Pid(), stop: sq.Kill}
			out.Rows = append(out.Rows, replayRow(t, o, "Squid "+pol, pct, capacity, c))
		}
	}
	return out
}

// replayRow replays t through c, then stops c.
func replayRow(t *trace.Trace, o *trace.Origin, name string, pct int, capacity int64, c *child) HitRatioRow {
	defer c.stop()
	fmt.Fprintf(os.Stderr, "   %s, memory %d%% of the footprint\n", name, pct)
	r, err := trace.Replay(t, o, c.addr, 10*time.Minute)
	must(err)
	if r.Wrong > 0 {
		fmt.Fprintf(os.Stderr, "   %s: %d wrong answers, the first: %s\n", name, r.Wrong, r.FirstWrong)
	}
	return HitRatioRow{Cache: name, Percent: pct, Memory: capacity, ObjectHit: r.ObjectHitRatio(), ByteHit: r.ByteHitRatio(),
		Wrong: r.Wrong, Seconds: r.Took.Seconds()}
}

func (r *Results) hitRatioMarkdown() string {
	h := r.HitRatio
	if h == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## 6d. Hit ratios on a real trace: %s, %d requests, %d objects, %.1f MiB distinct (sizes: %s)\n\n",
		h.Trace, h.Requests, h.Objects, float64(h.Footprint)/(1<<20), h.Sizes)
	b.WriteString("Object and byte hit ratio, as one minus what reached the origin; the simulated caches keep bodies only.\n\n")
	b.WriteString("| cache | 1 % objects | 1 % bytes | 5 % objects | 5 % bytes | 10 % objects | 10 % bytes |\n|---|---:|---:|---:|---:|---:|---:|\n")
	var names []string
	cells := map[string]map[int]HitRatioRow{}
	for _, row := range h.Rows {
		if cells[row.Cache] == nil {
			cells[row.Cache] = map[int]HitRatioRow{}
			names = append(names, row.Cache)
		}
		cells[row.Cache][row.Percent] = row
	}
	for _, n := range names {
		fmt.Fprintf(&b, "| %s", n)
		for _, pct := range []int{1, 5, 10} {
			row, ok := cells[n][pct]
			if !ok {
				b.WriteString(" | n/a | n/a")
				continue
			}
			fmt.Fprintf(&b, " | %.1f %% | %.1f %%", 100*row.ObjectHit, 100*row.ByteHit)
			if row.Wrong > 0 {
				fmt.Fprintf(&b, " (%d wrong)", row.Wrong)
			}
		}
		b.WriteString(" |\n")
	}
	return b.String()
}
