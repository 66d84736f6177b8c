// Command bench compares peerd with direct access and with Squid as the
// child proxy, in one run on loopback: keep-alive throughput and latency,
// the disk cache, failover when a parent dies (killed, then restarted) and when a parent's
// host vanishes (SYNs dropped), and memory for idle CONNECT tunnels. It
// prints a table and writes JSON, Markdown and an SVG chart under
// bench/results/. Squid and wrk are used when installed; without Squid its
// columns read n/a, without wrk a Go load generator is used. Every load
// loop is bounded in count and time.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

var (
	outDir       = flag.String("out", "bench/results", "results directory")
	duration     = flag.Duration("d", 5*time.Second, "throughput run length per target")
	conns        = flag.Int("c", 16, "connections for the throughput runs")
	size         = flag.Int("size", 512, "response body bytes of the throughput runs")
	lowRate      = flag.Int("lowrate", 100, "requests per second for the low-rate latency run through real Squid parents")
	sections     = flag.String("run", "throughput,tunnel,cache,disk,smallstore,hitratio,optimum,scale,cost,lowrate,failover,memory,connections,fleet,shared,icp,gray,relative,beyond,tls,auth", "sections to run, comma-separated")
	threads      = flag.Int("threads", 0, "worker threads of each child (peerd GOMAXPROCS, ATS exec threads; Squid has one); 0: each child's default (one per core)")
	rounds       = flag.Int("rounds", 3, "interleaved rounds of the throughput runs; figures are the medians")
	tunnels      = flag.Int("tunnels", 2000, "idle CONNECT tunnels for the memory run")
	fixedFor     = flag.Duration("fixedfor", 3*time.Second, "length of each fixed-rate run")
	cpuProfDir   = flag.String("cpuprofile", "", "directory for a CPU profile of every peerd child (PEERD_CPUPROFILE)")
	rate         = flag.Int("rate", 3000, "requests per second for the fixed-rate runs (latency and CPU per request)")
	fixedConns   = flag.Int("fixedconns", 0, "connections each fixed-rate run may open (0: as many as the pace needs); with e.g. 16, requests that find every connection busy wait for one, and the wait counts in their latency")
	fixedThreads = flag.Bool("fixedthreads", false, "add a throughput row for peerd with GOMAXPROCS set to one thread per core, beside the default that sizes its threads to the load")
	baseBin      = flag.String("base", "", "another peerd binary to measure beside this one in the throughput run (e.g. one built with -pgo=off, or from an older commit)")
	pin          = flag.Bool("pin", false, "give the child core 0 and wrk core 1 (taskset; use with -threads 1): latency without the load generator and the child sharing cores")
)

func main() {
	if os.Getenv(sinkEnv) != "" {
		runSink() // the connections section's tunnel sink
		return
	}
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
	if want("tunnel") {
		fmt.Fprintln(os.Stderr, "== tunnel: CPU per MiB through CONNECT tunnels, peerd beside ATS and Squid")
		res.Tunnel = tunnelRun(work, peerdBin, squidBin, atsBin)
	}
	if want("cache") {
		fmt.Fprintln(os.Stderr, "== cache: hits and misses, peerd beside Squid's cache_mem")
		res.Cache = cacheRun(work, peerdBin, squidBin)
	}
	if want("disk") {
		fmt.Fprintln(os.Stderr, "== disk cache: disk hits beside Squid's ufs, restarts, a 1 GiB object")
		res.Disk = diskRun(work, peerdBin, squidBin)
	}
	if want("smallstore") {
		fmt.Fprintln(os.Stderr, "== small objects: 4 KiB misses stored in memory only, and on disk too")
		res.SmallStore = smallStoreRun(work, peerdBin)
	}
	if want("hitratio") {
		fmt.Fprintln(os.Stderr, "== hit ratios: a real trace through peerd's memory cache and Squid's three policies, beside simulated LRU, GDSF and S3-FIFO")
		res.HitRatio = hitRatioRun(work, peerdBin, squidBin)
	}
	if want("optimum") {
		fmt.Fprintln(os.Stderr, "== optimum: bounds on the best any cache could do on web12 and a Zipf trace, beside LRU, GDSF, S3-FIFO and peerd's cache")
		res.Optimum = optimumRun()
	}
	if want("scale") {
		fmt.Fprintln(os.Stderr, "== scale: the disk index's RAM, load time and GC pauses at 10k, 1M and 10M objects")
		res.Scale = scaleRun(work, peerdBin)
	}
	if want("cost") {
		fmt.Fprintln(os.Stderr, "== cost: CPU per memory hit, disk hit, stored miss and eviction with 10k, 1M and 10M objects stored")
		res.Cost = costRun(work, peerdBin)
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
	if want("connections") {
		fmt.Fprintln(os.Stderr, "== connections: idle keep-alive connections and idle tunnels, RSS each, peerd beside Squid")
		res.Connections = connectionsRun(work, peerdBin, squidBin)
	}
	if want("fleet") {
		fmt.Fprintln(os.Stderr, "== fleet: three peerds, p1 killed, with gossip and without")
		res.Fleet = fleetRun(work, peerdBin, max(1, *rounds))
	}
	if want("shared") {
		fmt.Fprintln(os.Stderr, "== shared: a working set larger than one member's memory, through 1 peerd and 3 with shared_cache")
		res.Shared = sharedRun(work, peerdBin)
	}
	if want("icp") {
		fmt.Fprintln(os.Stderr, "== icp: asking a sibling by ICP and by HTTP only-if-cached")
		res.ICP = icpRun(work, peerdBin, squidBin)
	}
	if want("gray") {
		fmt.Fprintln(os.Stderr, "== gray failures: a parent that accepts but hangs or answers late")
		res.Gray = grayRun(work, peerdBin, squidBin)
	}
	if want("relative") {
		fmt.Fprintln(os.Stderr, "== relative: a parent slower than its siblings, and a tail every parent shares")
		res.Relative = relativeRun(work, peerdBin, squidBin)
	}
	if want("beyond") {
		fmt.Fprintln(os.Stderr, "== beyond: a parent that cannot reach one origin, and a peerd parent without a next hop")
		res.Beyond = beyondRun(work, peerdBin, squidBin)
	}
	if want("relload") {
		fmt.Fprintf(os.Stderr, "== relload: three equal parents on a host with both cores busy, %v\n", *relLoadFor)
		row := relativeLoadRun(work, peerdBin)
		res.RelativeLoad = &row
	}
	if want("beyondmem") {
		fmt.Fprintln(os.Stderr, "== beyondmem: a million destinations one parent cannot reach")
		res.BeyondMem = beyondMemRun(work, peerdBin)
	}
	if want("tls") {
		fmt.Fprintln(os.Stderr, "== tls: a parent reached over TLS, keep-alive and a new connection each request")
		res.TLS = tlsRun(work, peerdBin, squidBin)
	}
	if want("auth") {
		fmt.Fprintln(os.Stderr, "== auth: Basic credentials checked on every request")
		res.Auth = authRun(work, peerdBin, squidBin)
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

// pinChild moves every thread of the child to core 0 (-pin).
func pinChild(c *child) {
	if *pin && c != nil {
		if out, err := exec.Command("taskset", "-a", "-pc", "0", fmt.Sprint(c.pid)).CombinedOutput(); err != nil {
			must(fmt.Errorf("taskset: %v: %s", err, out))
		}
	}
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
