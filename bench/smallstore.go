package main

// This file holds the small-object store section: 4 KiB answers, each
// under a URL never asked before, fetched through a parent and stored,
// by peerd with its memory cache only and by peerd with a disk store
// too, in interleaved rounds: what storing a small object on disk costs
// in CPU beside keeping it in memory.

import (
	"fmt"
	"os"
	"strings"

	"github.com/peerd/peerd/internal/testbed"
)

const (
	smallMem  = "peerd small miss, stored in memory only"
	smallDisk = "peerd small miss, stored in memory and on disk"
)

// smallObject is the body size of the section's answers.
const smallObject = 4096

// SmallStoreResults is the section: the two rows and their ratio.
type SmallStoreResults struct {
	Rows  []Throughput `json:"rows"`
	Ratio float64      `json:"disk_over_memory_cpu_per_request"`
}

func smallStoreRun(work, peerdBin string) *SmallStoreResults {
	par, err := testbed.NewParent("small", smallObject)
	must(err)
	defer par.Close()
	par.SetHeader("Cache-Control", "max-age=86400")
	hops := []hop{hopOf(par)}
	targets := []tgt{
		{name: smallMem, unique: true, start: func() *child { return startPeerd(work, peerdBin, hops, "") }},
		{name: smallDisk, unique: true, start: func() *child {
			d, _ := os.MkdirTemp(work, "store-")
			return startPeerd(work, peerdBin, hops, diskConf(d, "512KiB"))
		}},
	}
	res := &SmallStoreResults{Rows: runRounds(targets, "", false)}
	if m := res.Rows[0].CPUusPerReq; m > 0 {
		res.Ratio = res.Rows[1].CPUusPerReq / m
	}
	fmt.Fprintf(os.Stderr, "  a stored small miss with a disk store: %.2f x the CPU of one in memory only\n", res.Ratio)
	return res
}

func (r *Results) smallStoreSection() string {
	if r.SmallStore == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## Small objects stored on disk\n\n")
	fmt.Fprintf(&b, "%d-byte answers, every request a URL never asked before, fetched through a parent and stored; median of interleaved rounds.\n\n", smallObject)
	b.WriteString("| child | req/s | CPU µs/req |\n|---|---:|---:|\n")
	for _, t := range r.SmallStore.Rows {
		fmt.Fprintf(&b, "| %s | %.0f | %.1f |\n", t.Target, t.RPS, t.CPUusPerReq)
	}
	fmt.Fprintf(&b, "\nCPU per stored miss with a disk store: %.2f x memory only.\n", r.SmallStore.Ratio)
	return b.String()
}
