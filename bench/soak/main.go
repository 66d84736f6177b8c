// Command soak runs peerd for a while under faults and reloads and checks
// that nothing is lost, nothing is sent twice and nothing leaks: three
// parents flap in turn (killed, refusing, black-holed; never more than one
// down at a time), 200 GETs and 10 POSTs a second plus CONNECT tunnels go
// through peerd, and peerd is reloaded every 10 seconds. It prints the
// figures and exits 1 when a goal is missed:
//
//   - lost GETs: 0 (a parent is always alive, and GETs are retried);
//   - POSTs that reached a parent twice: 0;
//   - client errors around reloads: 0;
//   - RSS, open fds and goroutines: end ≤ 1.2 × middle.
//
// Every load loop is bounded by the run's duration. Usage:
// go run ./bench/soak -d 10m (make soak; CI runs 60s).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/peerd/peerd/internal/testbed"
)

var (
	duration = flag.Duration("d", 10*time.Minute, "how long to soak")
	race     = flag.Bool("race", false, "build peerd with the race detector (and fail on a race report)")
	getRate  = flag.Int("gets", 200, "GETs per second")
	postRate = flag.Int("posts", 10, "POSTs per second")
	tunRate  = flag.Int("tunnels", 5, "CONNECT tunnels per second")
	flapGap  = flag.Duration("flap", 4*time.Second, "time between parent faults")
	reloadEv = flag.Duration("reload", 10*time.Second, "time between SIGHUP reloads")
	hold     = flag.Duration("hold", 0, "keep peerd running this long after the run, for inspection")
)

// settleFor bounds the wait, after the load stops, for what is still in
// flight to end (tunnels closing, the clients' last connections, requests
// draining); a leak outlasts it.
const settleFor = 20 * time.Second

func main() {
	flag.Parse()
	os.Exit(run())
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "soak:", err)
	return 2
}

func run() int {
	work, err := os.MkdirTemp("", "peerd-soak-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(work)
	bin, err := testbed.Build(work, *race)
	if err != nil {
		return fail(err)
	}
	var parents []*testbed.Parent
	for _, n := range []string{"p1", "p2", "p3"} {
		p, err := testbed.NewParent(n, 1024)
		if err != nil {
			return fail(err)
		}
		defer p.Close()
		parents = append(parents, p)
	}
	echo, err := echoServer()
	if err != nil {
		return fail(err)
	}
	defer echo.Close()
	config := func(gen int) string {
		var b strings.Builder
		b.WriteString(`[proxy]
listen = "127.0.0.1:0"
direct = "never"
connect_timeout = "1s"
read_timeout = "5s"
[access]
connect_ports = ["1-65535"]
[health]
connect_fail_limit = 3
probe_interval = "500ms"
probe_max_interval = "2s"
[selection]
policy = "weighted-round-robin"
[admin]
listen = "127.0.0.1:0"
[log]
level = "info"
`)
		for i, p := range parents {
			// Each reload changes a weight, so every reload changes
			// something.
			w := 1 + (gen+i)%3
			fmt.Fprintf(&b, "[[peer]]\nname = %q\nhost = \"127.0.0.1\"\nport = %s\nweight = %d\n", p.Name, p.Port(), w)
		}
		return b.String()
	}
	pd, err := testbed.StartPeerd(bin, work, config(0), "GORACE=atexit_sleep_ms=0")
	if err != nil {
		return fail(err)
	}
	defer pd.Stop()
	fmt.Fprintf(os.Stderr, "soak: peerd on %s for %s\n", pd.Proxy, *duration)

	start := time.Now()
	end := start.Add(*duration)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var reloads []time.Time
	var reloadMu sync.Mutex

	// Faults: each parent in turn, killed, refusing, black-holed; the one
	// before is back first, so two parents are always alive.
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(*flapGap)
		defer t.Stop()
		down := -1
		for n := 0; ; n++ {
			select {
			case <-stop:
				if down >= 0 {
					parents[down].Restart()
				}
				return
			case <-t.C:
			}
			if down >= 0 {
				parents[down].Restart()
			}
			down = n % 3
			switch (n / 3) % 3 {
			case 0:
				parents[down].Kill()
			case 1:
				parents[down].Kill() // refusing: the port is closed
			case 2:
				if err := parents[down].Blackhole(); err != nil {
					parents[down].Kill()
				}
			}
		}
	}()
	// Reloads.
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(*reloadEv)
		defer t.Stop()
		for gen := 1; ; gen++ {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			os.WriteFile(pd.Config, []byte(config(gen)), 0o644)
			reloadMu.Lock()
			reloads = append(reloads, time.Now())
			reloadMu.Unlock()
			pd.Signal(syscall.SIGHUP)
		}
	}()

	var res results
	client := pd.Client(15 * time.Second)
	load := func(rate int, do func(i int) outcome) {
		defer wg.Done()
		t := time.NewTicker(time.Second / time.Duration(rate))
		defer t.Stop()
		var inner sync.WaitGroup
		defer inner.Wait()
		sem := make(chan struct{}, 256) // bounded concurrency
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			select {
			case sem <- struct{}{}:
			default:
				res.record(outcome{kind: "overload", at: time.Now()})
				continue
			}
			inner.Add(1)
			go func(i int) {
				defer inner.Done()
				defer func() { <-sem }()
				res.record(do(i))
			}(i)
		}
	}
	wg.Add(3)
	go load(*getRate, func(i int) outcome { return request(client, "GET", fmt.Sprintf("http://o.soak/g%d", i), "") })
	go load(*postRate, func(i int) outcome {
		return request(client, "POST", fmt.Sprintf("http://o.soak/p%d", i), fmt.Sprintf("post-%d", i))
	})
	go load(*tunRate, func(int) outcome { return tunnelThrough(pd.Proxy, echo.Addr().String()) })

	// Resources after a warm-up, in the middle and at the end.
	warm := min(5*time.Second, *duration/6)
	time.Sleep(warm)
	first := pd.Stats()
	time.Sleep(time.Until(start.Add(*duration / 2)))
	middle := pd.Stats()
	time.Sleep(time.Until(end))
	close(stop)
	wg.Wait()
	// Let go of our own idle keep-alive connections; let pooled and tunnel
	// connections settle: the end is read until descriptors and goroutines
	// are back within the goal, or settleFor has passed (a leak stays).
	client.CloseIdleConnections()
	settled := func(st testbed.Stats) bool {
		return float64(st.FDs) <= 1.2*float64(middle.FDs)+16 && float64(st.Goroutines) <= 1.2*float64(middle.Goroutines)+16
	}
	last := pd.Stats()
	for deadline := time.Now().Add(settleFor); !settled(last) && time.Now().Before(deadline); last = pd.Stats() {
		time.Sleep(250 * time.Millisecond)
	}
	if *hold > 0 {
		fmt.Fprintf(os.Stderr, "soak: holding peerd (pid %d, admin %s) for %s\n", pd.Cmd.Process.Pid, pd.Admin, *hold)
		time.Sleep(*hold)
	}

	// POSTs seen twice: by one parent, or by two.
	seen := map[string]int{}
	for _, p := range parents {
		for id, n := range p.POSTIDs() {
			seen[id] += n
		}
	}
	dupPOSTs := 0
	for _, n := range seen {
		if n > 1 {
			dupPOSTs++
		}
	}
	reloadMu.Lock()
	aroundReload := res.aroundReloads(reloads)
	nReloads := len(reloads)
	reloadMu.Unlock()
	raced := strings.Contains(pd.Logs(), "DATA RACE")

	fmt.Printf("# peerd soak, %s\n\n", *duration)
	fmt.Printf("%d GETs/s, %d POSTs/s, %d tunnels/s; a parent fault every %s; %d reloads.\n\n", *getRate, *postRate, *tunRate, *flapGap, nReloads)
	fmt.Println("| figure | value | goal |\n|---|---:|---|")
	goals := true
	row := func(name string, v any, goal string, ok bool) {
		mark := ""
		if !ok {
			mark, goals = " **missed**", false
		}
		fmt.Printf("| %s | %v | %s%s |\n", name, v, goal, mark)
	}
	row("GETs", res.count("GET"), "", true)
	row("lost GETs", res.failed("GET"), "0", res.failed("GET") == 0)
	row("POSTs", res.count("POST"), "", true)
	row("POSTs answered with an error (the parent died holding them)", res.failed("POST"), "", true)
	row("POSTs that reached a parent twice", dupPOSTs, "0", dupPOSTs == 0)
	row("tunnels", res.count("CONNECT"), "", true)
	row("tunnels that failed (through a parent that died)", res.failed("CONNECT"), "", true)
	row("client errors around reloads", aroundReload, "0", aroundReload == 0)
	row("requests not sent (load generator saturated)", res.count("overload"), "", true)
	for _, r := range []struct {
		name       string
		a, m, z, d float64
	}{
		{"RSS MiB", first.RSSMiB, middle.RSSMiB, last.RSSMiB, 0},
		{"open fds", float64(first.FDs), float64(middle.FDs), float64(last.FDs), 16},
		{"goroutines", float64(first.Goroutines), float64(middle.Goroutines), float64(last.Goroutines), 16},
	} {
		// A small absolute slack: a handful of descriptors or goroutines
		// in flight at the moment of reading is not a leak.
		ok := r.z <= 1.2*r.m+r.d
		row(r.name+" start / middle / end", fmt.Sprintf("%.0f / %.0f / %.0f", r.a, r.m, r.z), "end ≤ 1.2 × middle", ok)
	}
	if *race {
		row("race reports", raced, "none", !raced)
	}
	if !goals {
		fmt.Fprintln(os.Stderr, "soak: goals missed; peerd's log:")
		fmt.Fprintln(os.Stderr, lastLines(pd.Logs(), 40))
		return 1
	}
	return 0
}

// outcome is one client operation's result.
type outcome struct {
	kind   string // GET, POST, CONNECT, overload
	at     time.Time
	ok     bool
	status int
	code   string // X-Peerd-Error
	err    string
}

type results struct {
	mu  sync.Mutex
	all []outcome
}

func (r *results) record(o outcome) {
	r.mu.Lock()
	r.all = append(r.all, o)
	r.mu.Unlock()
}

func (r *results) count(kind string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, o := range r.all {
		if o.kind == kind {
			n++
		}
	}
	return n
}

func (r *results) failed(kind string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, o := range r.all {
		if o.kind == kind && !o.ok {
			n++
		}
	}
	return n
}

// aroundReloads counts failures within a second of a reload that are not
// explained by a parent dying under the request (a POST or tunnel answered
// bad-gateway or cut).
func (r *results) aroundReloads(reloads []time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, o := range r.all {
		if o.ok || o.kind == "overload" {
			continue
		}
		if o.kind != "GET" && (o.code == "bad-gateway" || o.code == "timeout" || o.err != "") {
			continue
		}
		for _, t := range reloads {
			if d := o.at.Sub(t); d > -time.Second && d < time.Second {
				n++
				break
			}
		}
	}
	return n
}

func request(c *http.Client, method, u, body string) outcome {
	o := outcome{kind: method, at: time.Now()}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, u, rd)
	if method == http.MethodPost {
		req.Header.Set("X-Request-Id", body)
	}
	resp, err := c.Do(req)
	if err != nil {
		o.err = err.Error()
		return o
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	o.status, o.code = resp.StatusCode, resp.Header.Get("X-Peerd-Error")
	o.ok = err == nil && resp.StatusCode == 200
	if err != nil {
		o.err = err.Error()
	}
	return o
}

// tunnelThrough opens a CONNECT tunnel to the echo server and talks once.
func tunnelThrough(proxy, target string) outcome {
	o := outcome{kind: "CONNECT", at: time.Now()}
	c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
	if err != nil {
		o.err = err.Error()
		return o
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		o.err = err.Error()
		return o
	}
	o.status, o.code = resp.StatusCode, resp.Header.Get("X-Peerd-Error")
	if resp.StatusCode != 200 {
		return o
	}
	io.WriteString(c, "ping\n")
	line, err := br.ReadString('\n')
	if err != nil {
		o.err = err.Error()
		return o
	}
	o.ok = line == "ping\n"
	return o
}

// echoServer echoes lines, for the tunnels.
func echoServer() (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return ln, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
