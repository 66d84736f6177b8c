// Command replay holds a cache's hit ratios against a trace: it replays a
// sized request trace through a running proxy, in order, against an
// origin of its own that serves each object with exactly its size, and
// prints the object and byte hit ratios as one minus what reached the
// origin, beside LRU, GDSF and S3-FIFO simulated over the same bytes.
//
//	replay -trace bench/traces/web12.trace.gz -proxy 127.0.0.1:3128 -memory 4MiB
//	replay -zipf 100000 -sim 1%,5%,10%      simulate only, on a generated trace
//
// A trace is "time id size" per line, or "seq id" (keys only: each key is
// given a size from a seeded heavy-tailed distribution, and the output
// says so). The proxy must reach the origin on loopback (peerd:
// [access] deny_to_local = false) and should cache what the origin marks
// cacheable for a day.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/peerd/peerd/bench/trace"
	"github.com/peerd/peerd/internal/conf"
)

func main() {
	path := flag.String("trace", "bench/traces/web12.trace.gz", "the trace: \"time id size\" or \"seq id\" per line (.gz read as gzip)")
	zipf := flag.Int("zipf", 0, "instead of -trace, generate a Zipf trace of this many requests (with scans)")
	seed := flag.Uint64("seed", 1, "seed of the sizes given to a trace without them, and of -zipf")
	proxy := flag.String("proxy", "", "host:port of the proxy to replay through (\"\": simulate only)")
	memory := flag.String("memory", "", "the proxy's cache memory, to simulate beside it: bytes (4MiB, 512KiB) or a share of the footprint (5%)")
	sims := flag.String("sim", "", "capacities to simulate, comma-separated, as -memory (default: -memory, else 1%,5%,10%)")
	limit := flag.Duration("limit", 10*time.Minute, "stop the replay after this long")
	flag.Parse()

	var t *trace.Trace
	var err error
	if *zipf > 0 {
		t = trace.Zipf(*zipf, *zipf/10, 1.0001, *zipf/20, *zipf/100, *seed)
	} else if t, err = trace.Open(*path, *seed); err != nil {
		fail(err)
	}
	objects, footprint := t.Footprint()
	fmt.Printf("trace %s: %d requests, %d objects, %s distinct\n", t.Name, len(t.Requests), objects, mib(footprint))
	if !t.Sized {
		fmt.Printf("sizes: the trace has none; each key's is drawn from a log-normal (median 8 KiB, sigma 1.6, at most 16 MiB), seed %d\n", t.Seed)
	}
	caps := *sims
	if caps == "" {
		caps = *memory
	}
	if caps == "" {
		caps = "1%,5%,10%"
	}
	fmt.Printf("%-28s %12s %10s %10s\n", "cache", "memory", "objects", "bytes")
	for _, c := range strings.Split(caps, ",") {
		n, err := capacity(c, footprint)
		if err != nil {
			fail(err)
		}
		for _, p := range trace.Policies(n) {
			r := trace.Simulate(p, t)
			fmt.Printf("%-28s %12s %9.1f%% %9.1f%%\n", "simulated "+p.Name(), mib(n), 100*r.ObjectHitRatio(), 100*r.ByteHitRatio())
		}
	}
	if *proxy == "" {
		return
	}
	o, err := trace.StartOrigin()
	if err != nil {
		fail(err)
	}
	defer o.Close()
	r, err := trace.Replay(t, o, *proxy, *limit)
	if err != nil {
		fail(err)
	}
	label := "-"
	if *memory != "" {
		n, _ := capacity(*memory, footprint)
		label = mib(n)
	}
	fmt.Printf("%-28s %12s %9.1f%% %9.1f%%\n", "proxy "+*proxy, label, 100*r.ObjectHitRatio(), 100*r.ByteHitRatio())
	fmt.Printf("replayed %d of %d requests in %v; %d answers were not the whole object\n", r.Requests, len(t.Requests), r.Took.Round(time.Millisecond), r.Wrong)
	if r.Wrong > 0 {
		fmt.Fprintln(os.Stderr, "replay: the first wrong answer:", r.FirstWrong)
		os.Exit(1)
	}
}

// capacity reads "5%" (of footprint) or a size as peerd's config reads
// one ("4MiB", "512KiB", bytes; KB, MB and GB refused as ambiguous).
func capacity(s string, footprint int64) (int64, error) {
	s = strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil || f <= 0 {
			return 0, fmt.Errorf("%q is not a positive percentage", s)
		}
		return int64(f / 100 * float64(footprint)), nil
	}
	var b conf.ByteSize
	if err := b.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%v, or write a share of the footprint (5%%)", err)
	}
	if b <= 0 {
		return 0, fmt.Errorf("size %q must be positive", s)
	}
	return int64(b), nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "replay:", err)
	os.Exit(2)
}
