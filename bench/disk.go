package main

// This file holds the disk cache section: hits read from disk beside a
// memory hit and Squid's ufs cache_dir, the restart of a filled store
// (peerd's index against Squid's swap.state rebuild), the load of a
// generated million-object index, and peak RSS while relaying and storing
// a 1 GiB object.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peerd/peerd/cache"
	"github.com/peerd/peerd/internal/testbed"
)

// DiskResults is the disk section.
type DiskResults struct {
	Hits     []Throughput `json:"hits"`
	Restarts []RestartRow `json:"restarts"`
	Large    []LargeRow   `json:"large_object"`
}

// RestartRow is one store restarted.
type RestartRow struct {
	Child   string  `json:"child"`
	Objects int     `json:"objects"`
	Store   string  `json:"store"` // "filled over HTTP" or "generated index"
	ServeMs float64 `json:"restart_to_serving_ms"`
	LoadMs  float64 `json:"index_load_ms"`
	Rate    float64 `json:"objects_per_s"`
	HitsOK  int     `json:"hits_after_restart"`
	Checked int     `json:"checked"`
}

// LargeRow is peak RSS while a 1 GiB object is relayed and stored.
type LargeRow struct {
	Child   string  `json:"child"`
	MiB     int64   `json:"object_mib"`
	PeakMiB float64 `json:"peak_rss_mib"`
	Seconds float64 `json:"seconds"`
}

const (
	diskPeerdMem  = "peerd hit (memory)"
	diskPeerdDisk = "peerd hit (disk: body read from disk each time)"
	diskSquidUFS  = "squid hit (ufs cache_dir, cache_mem 0)"
	diskPeerdMiss = "peerd miss via parent, stored in memory and on disk"
	diskSquidMiss = "squid miss via parent, stored on ufs"
)

// diskConf is peerd's [cache] for a disk store in dir; bodies stay out of
// memory when inMemory is "1B".
func diskConf(dir, inMemory string) string {
	return fmt.Sprintf("\n[cache]\ndisk = %q\ndisk_size = \"100GiB\"\nmax_object = \"2GiB\"\nmax_object_in_memory = %q\n", dir, inMemory)
}

// startUFSSquid runs Squid as a caching child with a ufs cache_dir in dir
// and no memory cache, so that every hit is read from disk.
func startUFSSquid(work, bin, dir string, parents []hop) *child {
	sdir, _ := os.MkdirTemp(work, "squid-")
	os.MkdirAll(dir, 0o777)
	os.Chmod(dir, 0o777)
	var b strings.Builder
	fmt.Fprintf(&b, "cache_mem 0 MB\nmaximum_object_size 2 GB\ncache_dir ufs %s 20000 16 256\nconnect_timeout 1 seconds\nnever_direct allow all\n", dir)
	for _, p := range parents {
		fmt.Fprintf(&b, "cache_peer 127.0.0.1 parent %s 0 no-query no-digest name=%s\n", p.port, p.name)
	}
	sq, err := testbed.StartSquidStore(bin, sdir, testbed.SquidOptions{Name: "squid-" + filepath.Base(sdir), Extra: b.String(), NoAccessLog: true})
	must(err)
	return &child{kind: "squid", addr: sq.Addr, dir: sdir, pid: sq.Pid(), stop: sq.Kill, squid: sq}
}

func diskRun(work, peerdBin, squidBin string) *DiskResults {
	res := &DiskResults{}
	par := newParent("disk")
	defer par.Close()
	par.SetHeader("Cache-Control", "max-age=86400")
	hops := []hop{hopOf(par)}
	targets := []tgt{
		{name: diskPeerdMem, start: func() *child { return startPeerd(work, peerdBin, hops, "") }},
		{name: diskPeerdDisk, start: func() *child {
			d, _ := os.MkdirTemp(work, "store-")
			return startPeerd(work, peerdBin, hops, diskConf(d, "1B"))
		}},
	}
	targets = append(targets, tgt{name: diskPeerdMiss, unique: true, start: func() *child {
		d, _ := os.MkdirTemp(work, "store-")
		return startPeerd(work, peerdBin, hops, diskConf(d, "512KiB"))
	}})
	if squidBin != "" {
		targets = append(targets, tgt{name: diskSquidUFS, start: func() *child {
			d, _ := os.MkdirTemp(work, "ufs-")
			return startUFSSquid(work, squidBin, d, hops)
		}}, tgt{name: diskSquidMiss, unique: true, start: func() *child {
			d, _ := os.MkdirTemp(work, "ufs-")
			return startUFSSquid(work, squidBin, d, hops)
		}})
	}
	res.Hits = runRounds(targets, "", false)

	const filled = 100_000
	fmt.Fprintf(os.Stderr, "  restarts: %d objects stored over HTTP, then a restart\n", filled)
	res.Restarts = append(res.Restarts, restartPeerd(work, peerdBin, hops, filled))
	if squidBin != "" {
		res.Restarts = append(res.Restarts, restartSquid(work, squidBin, hops, filled))
	}
	for _, n := range []int{100_000, 1_000_000} {
		res.Restarts = append(res.Restarts, generatedIndex(work, peerdBin, n))
	}
	for _, r := range res.Restarts {
		fmt.Fprintf(os.Stderr, "  %-6s %8d objects (%s): serving after %.0f ms, index in %.0f ms (%.0f objects/s), %d/%d hits\n",
			r.Child, r.Objects, r.Store, r.ServeMs, r.LoadMs, r.Rate, r.HitsOK, r.Checked)
	}

	res.Large = append(res.Large, largeObject(work, "peerd", peerdBin, ""))
	if squidBin != "" {
		res.Large = append(res.Large, largeObject(work, "squid", "", squidBin))
	}
	return res
}

// fill asks for n distinct objects through addr, 32 at a time.
func fill(addr string, n int, prefix string) int {
	cl := proxyClient(addr, 10*time.Second)
	defer cl.CloseIdleConnections()
	var next, ok atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(5 * time.Minute)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				resp, err := cl.Get(fmt.Sprintf("http://origin.bench/%s/%d", prefix, i))
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return int(ok.Load())
}

// hitsOf asks again for a sample of what fill stored and counts the hits
// (Squid's X-Cache, peerd's Cache-Status).
func hitsOf(addr string, n, sample int, prefix string) int {
	cl := proxyClient(addr, 10*time.Second)
	defer cl.CloseIdleConnections()
	hits := 0
	for k := range sample {
		i := 1 + k*(n/sample)
		resp, err := cl.Get(fmt.Sprintf("http://origin.bench/%s/%d", prefix, i))
		if err != nil {
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if strings.Contains(resp.Header.Get("Cache-Status"), "hit") || strings.HasPrefix(resp.Header.Get("X-Cache"), "HIT") {
			hits++
		}
	}
	return hits
}

// cacheJSON is the part of GET /cache the bench reads.
type cacheJSON struct {
	DiskObjects  int64 `json:"disk_objects"`
	IndexLoading bool  `json:"index_loading"`
}

func peerdCache(c *child) cacheJSON {
	var s cacheJSON
	pd := &testbed.Peerd{Admin: c.admin}
	pd.AdminJSON("/cache", &s)
	return s
}

// restartPeerd fills a disk store over HTTP, stops peerd (SIGTERM) and
// times the restart: to the proxy port, and to the index loaded.
func restartPeerd(work, bin string, hops []hop, n int) RestartRow {
	store, _ := os.MkdirTemp(work, "store-")
	c := startPeerd(work, bin, hops, diskConf(store, "512KiB"))
	fill(c.addr, n, "p")
	waitUntil(60*time.Second, func() bool { return peerdCache(c).DiskObjects >= int64(n) })
	c.stop()
	t0 := time.Now()
	c = startPeerd(work, bin, hops, diskConf(store, "512KiB"))
	defer c.stop()
	row := RestartRow{Child: "peerd", Objects: n, Store: "filled over HTTP", ServeMs: ms(time.Since(t0))}
	waitUntil(60*time.Second, func() bool { return !peerdCache(c).IndexLoading })
	row.LoadMs = ms(time.Since(t0))
	row.Rate = float64(n) / (row.LoadMs / 1000)
	row.Checked = 200
	row.HitsOK = hitsOf(c.addr, n, row.Checked, "p")
	return row
}

// restartSquid does the same with Squid's ufs store: its rebuild time is
// the one cache.log reports.
func restartSquid(work, bin string, hops []hop, n int) RestartRow {
	store, _ := os.MkdirTemp(work, "ufs-")
	c := startUFSSquid(work, bin, store, hops)
	fill(c.addr, n, "s")
	c.squid.Stop() // SIGTERM: a clean swap.state
	logPath := filepath.Join(c.dir, "cache.log")
	before, _ := os.ReadFile(logPath)
	t0 := time.Now()
	must(c.squid.Start())
	defer c.stop()
	row := RestartRow{Child: "squid", Objects: n, Store: "filled over HTTP", ServeMs: ms(time.Since(t0))}
	took := regexp.MustCompile(`Took ([\d.]+) seconds \(\s*([\d.]+) objects/sec\)`)
	waitUntil(120*time.Second, func() bool {
		b, _ := os.ReadFile(logPath)
		m := took.FindAllSubmatch(b[min(len(before), len(b)):], -1)
		if len(m) == 0 {
			return false
		}
		last := m[len(m)-1]
		secs, _ := strconv.ParseFloat(string(last[1]), 64)
		row.LoadMs = secs * 1000
		row.Rate, _ = strconv.ParseFloat(string(last[2]), 64)
		return true
	})
	row.Checked = 200
	row.HitsOK = hitsOf(c.addr, n, row.Checked, "s")
	return row
}

// generatedIndex times peerd's start on a generated index of n objects
// (no bodies: the figure is the index alone).
func generatedIndex(work, bin string, n int) RestartRow {
	store, _ := os.MkdirTemp(work, "gen-")
	must(cache.WriteSyntheticIndex(store, n, 10<<10))
	t0 := time.Now()
	c := startPeerd(work, bin, nil, diskConf(store, "512KiB"))
	defer c.stop()
	row := RestartRow{Child: "peerd", Objects: n, Store: "generated index", ServeMs: ms(time.Since(t0))}
	waitUntil(60*time.Second, func() bool { return !peerdCache(c).IndexLoading })
	row.LoadMs = ms(time.Since(t0))
	row.Rate = float64(n) / (row.LoadMs / 1000)
	return row
}

// largeObject relays (and stores) a 1 GiB object through the child and
// reads its peak RSS.
func largeObject(work, kind, peerdBin, squidBin string) LargeRow {
	const size = 1 << 30
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=86400")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		for range size / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})}
	go srv.Serve(ln)
	defer srv.Close()
	h := []hop{{name: "big", port: portOf(ln.Addr().String())}}
	store, _ := os.MkdirTemp(work, "large-")
	var c *child
	if kind == "peerd" {
		c = startPeerd(work, peerdBin, h, diskConf(store, "512KiB"))
	} else {
		c = startUFSSquid(work, squidBin, store, h)
	}
	defer c.stop()
	cl := proxyClient(c.addr, 5*time.Minute)
	t0 := time.Now()
	resp, err := cl.Get("http://origin.bench/large")
	row := LargeRow{Child: kind, MiB: size >> 20}
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	row.Seconds = time.Since(t0).Seconds()
	row.PeakMiB = testbed.PeakRSSMiB(c.pid)
	fmt.Fprintf(os.Stderr, "  %-6s 1 GiB relayed and stored in %.1f s, peak RSS %.1f MiB\n", kind, row.Seconds, row.PeakMiB)
	return row
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// waitUntil polls cond (every 20 ms) for at most d.
func waitUntil(d time.Duration, cond func() bool) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for !cond() && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
}

// diskSection is the disk cache tables, with the goals.
func (r *Results) diskSection() string {
	d := r.Disk
	if d == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## 6. Disk cache: hits of the same %d B objects, %d connections, median of %d rounds\n\n", *size, *conns, max(1, *rounds))
	by := throughputTable(&b, "CPU µs per hit", d.Hits)
	b.WriteString("\n| child | objects | store | restart to serving ms | index loaded ms | objects/s | hits after restart |\n|---|---:|---|---:|---:|---:|---|\n")
	for _, x := range d.Restarts {
		hits := "n/a"
		if x.Checked > 0 {
			hits = fmt.Sprintf("%d of %d", x.HitsOK, x.Checked)
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %.0f | %.0f | %.0f | %s |\n", x.Child, x.Objects, x.Store, x.ServeMs, x.LoadMs, x.Rate, hits)
	}
	b.WriteString("\n| child | object | seconds | peak RSS MiB |\n|---|---:|---:|---:|\n")
	for _, x := range d.Large {
		fmt.Fprintf(&b, "| %s | %d MiB | %.1f | %.1f |\n", x.Child, x.MiB, x.Seconds, x.PeakMiB)
	}
	row := func(goal, fig string, ok bool) { fmt.Fprintf(&b, "| %s | %s | %v |\n", goal, fig, ok) }
	b.WriteString("\n| goal | figure | met |\n|---|---|---|\n")
	if m, k := by[diskPeerdMem], by[diskPeerdDisk]; m != nil && k != nil && m.CPUusPerReq > 0 {
		q := k.CPUusPerReq / m.CPUusPerReq
		row("disk hit CPU ≤ 2× a memory hit", fmt.Sprintf("%.1f / %.1f µs = %.2f×", k.CPUusPerReq, m.CPUusPerReq, q), q <= 2)
	}
	if k, s := by[diskPeerdDisk], by[diskSquidUFS]; k != nil && s != nil && s.CPUusPerReq > 0 {
		q := k.CPUusPerReq / s.CPUusPerReq
		row("disk hit CPU ≤ ½ Squid's ufs hit", fmt.Sprintf("%.1f / %.1f µs = %.2f", k.CPUusPerReq, s.CPUusPerReq, q), q <= 0.5)
	}
	for _, x := range d.Restarts {
		if x.Child == "peerd" && x.Store == "generated index" && x.Objects == 1_000_000 {
			row("index loads at ≥ 1M objects/s (1M objects)", fmt.Sprintf("%.0f objects/s", x.Rate), x.Rate >= 1e6)
			row("proxy port open within 1 s (1M objects)", fmt.Sprintf("%.0f ms", x.ServeMs), x.ServeMs <= 1000)
		}
	}
	return b.String()
}
