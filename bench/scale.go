package main

// This file holds the scale section: how the disk index's cost grows
// with the objects it names. For each size, a generated journal of n
// objects (cache.WriteSyntheticIndex: records only, no files) is loaded by
// a peerd; the figures are its RSS beyond an empty store's, per object,
// the time to the index loaded, and the GC pauses while it loaded and
// served (go_gc_pauses_seconds, from runtime/metrics).

import (
	"flag"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/peerd/peerd/cache"
	"github.com/peerd/peerd/internal/testbed"
)

var scaleSizes = flag.String("scale", "10000,1000000,10000000", "objects in the generated disk indexes of the scale section, comma-separated")

// ScaleRow is the disk index at one size.
type ScaleRow struct {
	Objects        int     `json:"objects"`
	RSSMiB         float64 `json:"rss_mib"`
	BytesPerObject float64 `json:"ram_bytes_per_object"`
	ServeMs        float64 `json:"start_to_serving_ms"`
	LoadMs         float64 `json:"index_load_ms"`
	GCPauseP99Ms   float64 `json:"gc_pause_p99_ms"`
	GCPauses       int64   `json:"gc_pauses"`
}

func scaleRun(work, bin string) []ScaleRow {
	empty := scaleOnce(work, bin, 0)
	fmt.Fprintf(os.Stderr, "   an empty store: RSS %.1f MiB\n", empty.RSSMiB)
	rows := []ScaleRow{}
	for _, f := range strings.Split(*scaleSizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		must(err)
		r := scaleOnce(work, bin, n)
		r.BytesPerObject = (r.RSSMiB - empty.RSSMiB) * (1 << 20) / float64(n)
		fmt.Fprintf(os.Stderr, "   %d objects: %.0f B each, loaded in %.0f ms, GC pause p99 %.2f ms\n", n, r.BytesPerObject, r.LoadMs, r.GCPauseP99Ms)
		rows = append(rows, r)
	}
	return rows
}

// scaleOnce loads a generated index of n objects (0: an empty store).
func scaleOnce(work, bin string, n int) ScaleRow {
	store, _ := os.MkdirTemp(work, "scale-")
	defer os.RemoveAll(store)
	if n > 0 {
		must(cache.WriteSyntheticIndex(store, n, 10<<10))
		// A restart reads a journal written long before: the kernel is
		// not still writing this one back while peerd loads it.
		syscall.Sync()
	}
	conf := fmt.Sprintf("\n[cache]\ndisk = %q\ndisk_size = \"1000000GiB\"\nmax_object = \"2GiB\"\n", store)
	t0 := time.Now()
	c := startPeerd(work, bin, nil, conf)
	defer c.stop()
	row := ScaleRow{Objects: n, ServeMs: ms(time.Since(t0))}
	waitUntil(10*time.Minute, func() bool { return !peerdCache(c).IndexLoading })
	row.LoadMs = ms(time.Since(t0))
	if got := peerdCache(c).DiskObjects; n > 0 && got != int64(n) {
		must(fmt.Errorf("scale: %d objects loaded of %d", got, n))
	}
	// The loader's buffers and the sweep's id list become garbage: RSS is
	// read once two reads 250 ms apart agree within 0.5 MiB (10 s at most).
	row.RSSMiB = testbed.RSSMiB(c.pid)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(250 * time.Millisecond)
		now := testbed.RSSMiB(c.pid)
		settled := math.Abs(now-row.RSSMiB) < 0.5
		row.RSSMiB = now
		if settled {
			break
		}
	}
	row.GCPauseP99Ms, row.GCPauses = gcPauses(c.admin)
	return row
}

// gcPauses reads go_gc_pauses_seconds (a histogram) from peerd's metrics:
// its 99th percentile, as the upper bound of the bucket it falls in, in
// ms, and the pauses counted.
func gcPauses(admin string) (p99ms float64, count int64) {
	resp, err := http.Get("http://" + admin + "/metrics")
	must(err)
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	must(err)
	f := fams["go_gc_pauses_seconds"]
	if f == nil || len(f.GetMetric()) == 0 {
		return 0, 0
	}
	h := f.GetMetric()[0].GetHistogram()
	count = int64(h.GetSampleCount())
	for _, b := range h.GetBucket() {
		if float64(b.GetCumulativeCount()) >= 0.99*float64(count) {
			return b.GetUpperBound() * 1000, count
		}
	}
	return math.Inf(1), count // in the +Inf bucket
}

func (r *Results) scaleMarkdown() string {
	if len(r.Scale) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## 6e. The disk index at scale: generated journals of n objects (records only)\n\n")
	b.WriteString("| objects | RAM per object | RSS MiB | start to serving ms | index loaded ms | GC pause p99 ms | GC pauses |\n|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.Scale {
		fmt.Fprintf(&b, "| %d | %.0f B | %.1f | %.0f | %.0f | %.2f | %d |\n", s.Objects, s.BytesPerObject, s.RSSMiB, s.ServeMs, s.LoadMs, s.GCPauseP99Ms, s.GCPauses)
	}
	return b.String()
}
