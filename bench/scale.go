package main

// This file holds the scale section: how the disk index's cost grows
// with the objects it names. For each size, a generated journal of n
// objects (cache.WriteSyntheticIndex: records only, no files) is loaded by
// a peerd; the figures are its RSS beyond an empty store's, per object,
// the time to the index loaded, and the GC pauses while it loaded and
// served (go_gc_pauses_seconds, from runtime/metrics). Then the same
// after a clean stop, which leaves the index's image: the restart reads
// it instead of the journal.

import (
	"flag"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
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
	// Then peerd is stopped (it writes the index's image) and started
	// again on the same store: the stop's time, and the restart's.
	StopMs              float64 `json:"clean_stop_ms"`
	ImageServeMs        float64 `json:"restart_to_serving_ms"`
	ImageLoadMs         float64 `json:"restart_index_load_ms"`
	ImageRSSMiB         float64 `json:"restart_rss_mib"`
	ImageBytesPerObject float64 `json:"restart_ram_bytes_per_object"`
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
		r.ImageBytesPerObject = (r.ImageRSSMiB - empty.ImageRSSMiB) * (1 << 20) / float64(n)
		fmt.Fprintf(os.Stderr, "   %d objects: %.0f B each, loaded in %.0f ms, GC pause p99 %.2f ms; stopped in %.0f ms, loaded again (image) in %.0f ms, %.0f B each\n",
			n, r.BytesPerObject, r.LoadMs, r.GCPauseP99Ms, r.StopMs, r.ImageLoadMs, r.ImageBytesPerObject)
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
	row := ScaleRow{Objects: n}
	var c *child
	row.ServeMs, row.LoadMs, row.RSSMiB, c = loadIndex(work, bin, conf, n)
	row.GCPauseP99Ms, row.GCPauses = gcPauses(c.admin)
	t1 := time.Now()
	c.stop()
	row.StopMs = ms(time.Since(t1))
	if _, err := os.Stat(filepath.Join(store, "index")); err != nil {
		must(fmt.Errorf("scale: no index image after a clean stop: %w", err))
	}
	syscall.Sync() // (as the journal: written long before the restart)
	row.ImageServeMs, row.ImageLoadMs, row.ImageRSSMiB, c = loadIndex(work, bin, conf, n)
	c.stop()
	return row
}

// loadIndex starts peerd on the store of conf, which holds n objects,
// and reports when its port opened and its index was loaded, and its
// RSS once settled.
func loadIndex(work, bin, conf string, n int) (serveMs, loadMs, rssMiB float64, c *child) {
	t0 := time.Now()
	c = startPeerd(work, bin, nil, conf)
	serveMs = ms(time.Since(t0))
	waitUntil(10*time.Minute, func() bool { return !peerdCache(c).IndexLoading })
	loadMs = ms(time.Since(t0))
	if got := peerdCache(c).DiskObjects; n > 0 && got != int64(n) {
		must(fmt.Errorf("scale: %d objects loaded of %d", got, n))
	}
	// The loader's buffers and the sweep's id list become garbage: RSS is
	// read once two reads 250 ms apart agree within 0.5 MiB (10 s at most).
	rssMiB = testbed.RSSMiB(c.pid)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(250 * time.Millisecond)
		now := testbed.RSSMiB(c.pid)
		settled := math.Abs(now-rssMiB) < 0.5
		rssMiB = now
		if settled {
			break
		}
	}
	return serveMs, loadMs, rssMiB, c
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
	b.WriteString("| objects | RAM per object | RSS MiB | start to serving ms | index loaded ms | GC pause p99 ms | GC pauses | clean stop ms | restart to serving ms | index loaded (image) ms | RAM per object (image) |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.Scale {
		fmt.Fprintf(&b, "| %d | %.0f B | %.1f | %.0f | %.0f | %.2f | %d | %.0f | %.0f | %.0f | %.0f B |\n", s.Objects, s.BytesPerObject, s.RSSMiB, s.ServeMs, s.LoadMs,
			s.GCPauseP99Ms, s.GCPauses, s.StopMs, s.ImageServeMs, s.ImageLoadMs, s.ImageBytesPerObject)
	}
	return b.String()
}
