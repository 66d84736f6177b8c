package main

// This file holds the optimum section: on web12 and on a Zipf trace with
// scans, at 1, 5 and 10 % of each trace's footprint, the bounds on the
// best any cache could do (bench/trace/optimum.go: Belady-Size, a cache
// that knows the future, below the optimum; PFOO-L above it) beside LRU,
// GDSF, S3-FIFO and peerd's memory cache driven through its own API, and
// each policy's share of the distance from LRU to the optimum, for object
// hits and for byte hits. No HTTP: it takes seconds.

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/peerd/peerd/bench/trace"
)

// OptimumRow is one cache on one trace at one size.
type OptimumRow struct {
	Trace     string  `json:"trace"`
	Cache     string  `json:"cache"`
	Percent   int     `json:"percent_of_footprint"`
	ObjectHit float64 `json:"object_hit_ratio"`
	ByteHit   float64 `json:"byte_hit_ratio"`
}

// Optimum is the section.
type Optimum struct {
	Traces []string     `json:"traces"`
	Rows   []OptimumRow `json:"rows"`
}

// Names of the bounds' rows.
const (
	lowerBound = "Belady-Size (knows the future: at most the optimum)"
	upperBound = "PFOO-L (at least the optimum)"
)

// zipfTrace is the section's synthetic trace: 400,000 requests over
// 40,000 objects, Zipf 1.1, a scan of 2,000 new objects every 40,000.
func zipfTrace() *trace.Trace { return trace.Zipf(400_000, 40_000, 1.1, 40_000, 2_000, 1) }

func optimumRun() *Optimum {
	web, err := trace.Open(*tracePath, *traceSeed)
	must(err)
	web.Name = filepath.Base(*tracePath)
	out := &Optimum{}
	for _, t := range []*trace.Trace{web, zipfTrace()} {
		out.Traces = append(out.Traces, t.Name)
		_, footprint := t.Footprint()
		for _, pct := range []int{1, 5, 10} {
			capacity := footprint * int64(pct) / 100
			add := func(name string, objects, bytes trace.Result) {
				out.Rows = append(out.Rows, OptimumRow{Trace: t.Name, Cache: name, Percent: pct,
					ObjectHit: objects.ObjectHitRatio(), ByteHit: bytes.ByteHitRatio()})
			}
			for _, p := range trace.Policies(capacity) {
				r := trace.Simulate(p, t)
				add(p.Name(), r, r)
			}
			r, err := trace.CacheRun(t, capacity)
			must(err)
			add("peerd", r, r)
			add(lowerBound, trace.BeladySize(t, capacity, trace.Objects, 1), trace.BeladySize(t, capacity, trace.Bytes, 1))
			add(upperBound, trace.PFOOL(t, capacity, trace.Objects), trace.PFOOL(t, capacity, trace.Bytes))
		}
	}
	return out
}

func (r *Results) optimumMarkdown() string {
	o := r.Optimum
	if o == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## 6f. The optimum: bounds on the best any cache could do, and each policy's share of the way from LRU to it\n\n")
	b.WriteString("Object hits / byte hits in %; for a policy, then its share of the LRU→optimum gap closed (objects, bytes), measured against the upper bound and against Belady-Size (the optimum lies between, so the share does too).\n")
	for _, tr := range o.Traces {
		fmt.Fprintf(&b, "\n%s\n\n| cache | 1 %% | 5 %% | 10 %% |\n|---|---|---|---|\n", tr)
		cells := map[string]map[int]OptimumRow{}
		var names []string
		for _, row := range o.Rows {
			if row.Trace != tr {
				continue
			}
			if cells[row.Cache] == nil {
				cells[row.Cache] = map[int]OptimumRow{}
				names = append(names, row.Cache)
			}
			cells[row.Cache][row.Percent] = row
		}
		for _, n := range names {
			fmt.Fprintf(&b, "| %s", n)
			for _, pct := range []int{1, 5, 10} {
				row := cells[n][pct]
				fmt.Fprintf(&b, " | %.1f / %.1f", 100*row.ObjectHit, 100*row.ByteHit)
				if n != lowerBound && n != upperBound && n != "LRU" {
					lru, lo, up := cells["LRU"][pct], cells[lowerBound][pct], cells[upperBound][pct]
					fmt.Fprintf(&b, " (gap %.0f–%.0f %% / %.0f–%.0f %%)",
						100*trace.GapClosed(row.ObjectHit, lru.ObjectHit, up.ObjectHit), 100*trace.GapClosed(row.ObjectHit, lru.ObjectHit, lo.ObjectHit),
						100*trace.GapClosed(row.ByteHit, lru.ByteHit, up.ByteHit), 100*trace.GapClosed(row.ByteHit, lru.ByteHit, lo.ByteHit))
				}
			}
			b.WriteString(" |\n")
		}
	}
	return b.String()
}
