package main

// This file holds the cost section: how the CPU of a request grows with
// the objects the disk store holds. For each size of the scale section
// (10k, 1M and 10M objects by default) a store with that many objects
// (cache.WriteSyntheticIndex) is loaded, and peerd's CPU is measured per
// memory hit, per disk hit, per stored miss with room in the store, and
// per stored miss in a full store, with the evictions each caused. The
// two misses differ by less than their noise (an eviction is a few µs,
// a miss a hundred), so one eviction's CPU is measured in-process by the
// cache's BenchmarkDiskEviction instead.

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/peerd/peerd/cache"
	"github.com/peerd/peerd/internal/testbed"
)

// The synthetic objects' size, as the scale section writes them.
const costObjectSize = 10 << 10

// CostRow is the CPU per request at one store size.
type CostRow struct {
	Objects       int     `json:"objects"`
	MemoryHitUs   float64 `json:"cpu_us_per_memory_hit"`
	DiskHitUs     float64 `json:"cpu_us_per_disk_hit"`
	StoredMissUs  float64 `json:"cpu_us_per_stored_miss"`
	FullMissUs    float64 `json:"cpu_us_per_stored_miss_full_store"`
	EvictionsPer  float64 `json:"evictions_per_stored_miss_full_store"`
	FullMissCount int64   `json:"full_store_requests"`
}

func costRun(work, bin string) []CostRow {
	par, err := testbed.NewParent("cost", smallObject)
	must(err)
	defer par.Close()
	par.SetHeader("Cache-Control", "max-age=86400")
	var rows []CostRow
	for _, f := range strings.Split(*scaleSizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		must(err)
		rows = append(rows, costOnce(work, bin, par, n))
	}
	return rows
}

// costOnce measures the four requests with a store of n objects, each
// started from a fresh copy of the generated journal.
func costOnce(work, bin string, par *testbed.Parent, n int) CostRow {
	hops := []hop{hopOf(par)}
	gen, _ := os.MkdirTemp(work, "cost-gen-")
	defer os.RemoveAll(gen)
	must(cache.WriteSyntheticIndex(gen, n, costObjectSize))
	var evicted, asked int64
	start := func(inMemory string, size int64, full bool) func() *child {
		return func() *child {
			store, _ := os.MkdirTemp(work, "cost-")
			copyFile(filepath.Join(gen, "journal"), filepath.Join(store, "journal"))
			conf := fmt.Sprintf("\n[cache]\ndisk = %q\ndisk_size = \"%dB\"\nmax_object = \"1MiB\"\nmax_object_in_memory = %q\n", store, size, inMemory)
			c := startPeerd(work, bin, hops, conf)
			waitUntil(10*time.Minute, func() bool { return !peerdCache(c).IndexLoading })
			if full {
				// Each miss of the round stored one object (the parent saw
				// it): those not counted as more objects on disk took the
				// place of one or more.
				objects, misses, stop := peerdCache(c).DiskObjects, par.Requests(), c.stop
				c.stop = func() {
					m := par.Requests() - misses
					evicted += m - (settledObjects(c) - objects)
					asked += m
					stop()
				}
			}
			return c
		}
	}
	roomy := int64(n+1<<20) * costObjectSize * 4
	targets := []tgt{
		{name: "memory hit", start: start("512KiB", roomy, false)},
		{name: "disk hit", start: start("1B", roomy, false)},
		{name: "stored miss", unique: true, start: start("512KiB", roomy, false)},
		{name: "stored miss, full store", unique: true, start: start("512KiB", int64(n)*costObjectSize, true)},
	}
	rs := runRounds(targets, "", false)
	row := CostRow{Objects: n, MemoryHitUs: rs[0].CPUusPerReq, DiskHitUs: rs[1].CPUusPerReq,
		StoredMissUs: rs[2].CPUusPerReq, FullMissUs: rs[3].CPUusPerReq, FullMissCount: asked}
	if asked > 0 && evicted > 0 {
		row.EvictionsPer = float64(evicted) / float64(asked)
	}
	fmt.Fprintf(os.Stderr, "   %d objects: µs per memory hit %.1f, disk hit %.1f, stored miss %.1f, in a full store %.1f (%.2f evictions each)\n",
		n, row.MemoryHitUs, row.DiskHitUs, row.StoredMissUs, row.FullMissUs, row.EvictionsPer)
	return row
}

// settledObjects is the objects on disk once the writes still queued
// have landed: two reads 200 ms apart agree (5 s at most).
func settledObjects(c *child) int64 {
	n := peerdCache(c).DiskObjects
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		m := peerdCache(c).DiskObjects
		if m == n {
			break
		}
		n = m
	}
	return n
}

func copyFile(from, to string) {
	in, err := os.Open(from)
	must(err)
	defer in.Close()
	out, err := os.Create(to)
	must(err)
	_, err = io.Copy(out, in)
	must(err)
	must(out.Close())
}

func (r *Results) costSection() string {
	if len(r.Cost) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## How cost grows with the objects stored\n\n")
	fmt.Fprintf(&b, "CPU µs per request, a store of N generated objects loaded first; %d-byte answers; median of interleaved rounds. The full store's misses each evicted the objects counted; an eviction's own CPU (a few µs) is below these rounds' noise: `go test -bench DiskEviction ./cache` measures it.\n\n", smallObject)
	b.WriteString("| objects | memory hit | disk hit | stored miss | stored miss, full store | evictions each |\n|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range r.Cost {
		fmt.Fprintf(&b, "| %d | %.1f | %.1f | %.1f | %.1f | %.2f |\n", c.Objects, c.MemoryHitUs, c.DiskHitUs, c.StoredMissUs, c.FullMissUs, c.EvictionsPer)
	}
	return b.String()
}
