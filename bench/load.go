package main

// This file holds the load generators of the throughput runs: wrk, or Go
// clients as fast as they go, and Go clients at a fixed rate (open loop),
// with their percentiles.

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// loadURLs drives addr for d; unique makes every request's URL one not asked
// before (a cold cache: each is a miss, fetched and stored).
func loadURLs(wrkBin, addr string, d time.Duration, unique bool) Throughput {
	if wrkBin != "" {
		return wrkLoad(wrkBin, addr, d, unique)
	}
	return goLoad(addr, d, unique)
}

// wrkLoad drives addr with wrk, sending absolute-URI requests so that the
// proxy (or the parent, which accepts them too) is addressed as a proxy.
func wrkLoad(bin, addr string, d time.Duration, unique bool) Throughput {
	script := filepath.Join(os.TempDir(), "peerd-bench.lua")
	lua := fmt.Sprintf("wrk.path = %q\nwrk.headers[\"Host\"] = \"origin.bench\"\n", target)
	if unique {
		// Each wrk thread has its own Lua state: a random prefix per
		// thread keeps their URLs apart.
		lua = fmt.Sprintf(`math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))
local prefix, n = math.random(1, 2^30), 0
request = function()
  n = n + 1
  return wrk.format("GET", %q .. "?" .. prefix .. "-" .. n, {["Host"] = "origin.bench"})
end
`, target)
	}
	os.WriteFile(script, []byte(lua), 0o644)
	args := []string{"-t2", fmt.Sprintf("-c%d", *conns), fmt.Sprintf("-d%ds", int(d.Seconds())), "--latency", "-s", script, "http://" + addr + "/"}
	cmd := exec.Command(bin, args...)
	if *pin {
		// The load generator on core 1, one thread; the child has core 0.
		args[0] = "-t1"
		cmd = exec.Command("taskset", append([]string{"-c", "1", bin}, args...)...)
	}
	out, err := cmd.CombinedOutput()
	must(err)
	s := string(out)
	r := Throughput{}
	if m := regexp.MustCompile(`Requests/sec:\s+([\d.]+)`).FindStringSubmatch(s); m != nil {
		r.RPS, _ = strconv.ParseFloat(m[1], 64)
	}
	r.P50ms = wrkPct(s, "50%")
	r.P99ms = wrkPct(s, "99%")
	if m := regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`).FindStringSubmatch(s); m != nil {
		r.Errors, _ = strconv.Atoi(m[1])
	}
	if m := regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`).FindStringSubmatch(s); m != nil {
		for _, x := range m[1:] {
			n, _ := strconv.Atoi(x)
			r.Errors += n
		}
	}
	return r
}

func wrkPct(s, pct string) float64 {
	m := regexp.MustCompile(`\s` + regexp.QuoteMeta(pct) + `\s+([\d.]+)(us|ms|s)`).FindStringSubmatch(s)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	switch m[2] {
	case "us":
		return v / 1000
	case "s":
		return v * 1000
	}
	return v
}

func proxyClient(addr string, timeout time.Duration) *http.Client {
	u, _ := url.Parse("http://" + addr)
	u.User = loadUser // Basic credentials for the auth rows (nil: none)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), MaxIdleConnsPerHost: 256, DisableCompression: true}, Timeout: timeout}
}

// goLoad is a closed-loop generator: *conns workers for d; unique as in
// loadURLs.
func goLoad(addr string, d time.Duration, unique bool) Throughput {
	c := proxyClient(addr, 10*time.Second)
	var mu sync.Mutex
	var lat []time.Duration
	errs := 0
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	var seq atomic.Int64
	for w := 0; w < *conns; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				u := target
				if unique {
					u = fmt.Sprintf("%s?go-%d-%d", target, time.Now().UnixNano(), seq.Add(1))
				}
				t0 := time.Now()
				ok := getOK(c, u)
				mu.Lock()
				if ok {
					lat = append(lat, time.Since(t0))
				} else {
					errs++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return Throughput{RPS: float64(len(lat)) / d.Seconds(), P50ms: pctMs(lat, 0.5), P99ms: pctMs(lat, 0.99), Errors: errs}
}

// fixedRate sends rps requests per second for d (open loop: a slow answer
// does not delay the next request; with -fixedconns the request may wait
// for a connection, and that wait is in its latency) and returns p50 and
// p99 latency and the rate the requests were sent at.
func fixedRate(addr, target string, rps int, d time.Duration) (p50, p99 float64, errs int, sentRate float64) {
	c := proxyClient(addr, 10*time.Second)
	defer c.CloseIdleConnections()
	// With no cap, a stall near the machine's capacity draws a new
	// connection per request due: at 9,000 req/s on two cores that ran
	// this process (the parent's side too) and a floor out of file
	// descriptors, and every later child's run failed.
	c.Transport.(*http.Transport).MaxConnsPerHost = *fixedConns
	n := int(d.Seconds() * float64(rps))
	lat := make([]time.Duration, n)
	// Request i is due at start + i/rps. A ticker cannot keep this pace:
	// the runtime's timers fire at most about once a millisecond, a
	// ticker drops the ticks it could not deliver, and at 3,000 req/s
	// it sent about 1,800. Sleeping to each request's due time sends the
	// ones that fell due together at once, so the rate holds on average.
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		if w := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rps))); w > 0 {
			time.Sleep(w)
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			t0 := time.Now()
			resp, err := c.Get(target)
			if err != nil {
				lat[i] = time.Hour
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			lat[i] = time.Since(t0)
			if resp.StatusCode != 200 {
				lat[i] = time.Hour
			}
		}(i)
	}
	sentRate = float64(n) / time.Since(start).Seconds()
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	for _, l := range lat {
		if l == time.Hour {
			errs++
		}
	}
	return pctMs(lat, 0.5), pctMs(lat, 0.99), errs, sentRate
}

// getOK GETs u through c, reads the body to the end and reports a 200.
func getOK(c *http.Client, u string) bool {
	resp, err := c.Get(u)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == 200
}

func pctMs(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return float64(sorted[i]) / float64(time.Millisecond)
}
