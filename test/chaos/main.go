// Command chaos runs peerd under a seeded schedule of faults across every
// feature at once and checks invariants on every exchange. Three members
// of a fleet share their caches in front of three fault-injecting parents
// (which are also the origin). Clients send a mix of cacheable and
// uncacheable GETs, HEADs, POSTs, conditional and Range GETs and CONNECT
// tunnels, kept-alive and one-shot, to members a and b. Per exchange the
// parents may answer late, trickle, reset, close without answering,
// answer their own 503 or relay an origin's 500, cut a body short, break
// a chunk, send bytes past the end, or say its connect to the origin
// failed; over the run a parent is killed and started again, a parent
// cannot reach the origin for a while, a parent has no next hop of its
// own for a while, member a is stalled (SIGSTOP), reloaded (SIGHUP) and
// upgraded (SIGUSR2), and member c is killed and started again.
//
// The invariants (see client.go and check.go): I1 a 2xx body is the
// origin's, byte for byte; I2 a cut only where the origin cut, any other
// failure an error peerd made whole; I3 a POST reaches the origin at most
// once; I4 a parent is marked dead, suspect or an outlier only after a
// fault of its own (never for what it says of its next hop); I5 nothing is stored from a cut or failed answer; I6
// descriptors and goroutines return to their baseline; I7 every request
// span exported (to a collector that hangs now and then) names its own
// exchange's URL.
//
// Usage: go run ./test/chaos -seed 7 -d 60s (make chaos SEED=7
// DURATION=60s). It prints a table, then each violation with its seed,
// exchange and schedule (last, so a log cut to its tail keeps them), and
// exits 1 on any violation.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/peerd/peerd/internal/testbed"
)

var (
	seedFlag = flag.Uint64("seed", 1, "the schedule's seed")
	duration = flag.Duration("d", 60*time.Second, "how long to run the load and the faults")
	workers  = flag.Int("workers", 12, "concurrent clients")
	race     = flag.Bool("race", false, "build peerd with the race detector")
	keep     = flag.Bool("keep", false, "keep the work folder (logs, configs) after the run")
)

func main() {
	flag.Parse()
	os.Exit(run())
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "chaos:", err)
	return 2
}

func run() int {
	seed := *seedFlag
	work, err := os.MkdirTemp("", "peerd-chaos-")
	if err != nil {
		return fail(err)
	}
	if *keep {
		fmt.Fprintln(os.Stderr, "chaos: work folder", work)
	} else {
		defer os.RemoveAll(work)
	}
	bin, err := testbed.Build(work, *race)
	if err != nil {
		return fail(err)
	}
	start := time.Now()
	rec := newRecord()
	var parents []*parent
	for _, n := range []string{"p1", "p2", "p3"} {
		p, err := newParent(n, seed, start, rec)
		if err != nil {
			return fail(err)
		}
		defer p.kill()
		parents = append(parents, p)
	}
	col, err := newCollector(seed, start)
	if err != nil {
		return fail(err)
	}
	defer col.close()
	ms, err := startFleet(work, bin, parents, col.url)
	for _, m := range ms {
		defer m.stop()
	}
	// Interrupted, the members are stopped all the same: they are not
	// this process's children once an upgrade or a restart made them.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sigs
		for _, m := range ms {
			m.stop()
		}
		os.RemoveAll(work)
		os.Exit(2)
	}()
	if err != nil {
		return fail(err)
	}
	r := &report{seed: seed, start: start, rec: rec}
	base := baselines(ms[:2])

	proxies := [2]string{ms[0].proxy, ms[1].proxy}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var next atomic.Uint64
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &client{seed: seed, start: start, rec: rec}
			defer c.close()
			for n := 0; n < 1_000_000; n++ { // bounded in count, and by stop
				select {
				case <-stop:
					return
				default:
				}
				e := exchangeFor(seed, next.Add(1))
				r.note(e, c.do(e, proxies), rec)
			}
		}()
	}
	events := timeline(seed, *duration)
	for _, ev := range events {
		time.Sleep(time.Until(start.Add(ev.at)))
		if err := apply(ev, ms, parents, bin); err != nil {
			r.eventFailed(ev, err)
		}
		r.event(ev)
	}
	time.Sleep(time.Until(start.Add(*duration)))
	close(stop)
	wg.Wait()

	r.checkSpans(col)
	r.checkPosts()
	r.checkBlame(ms, parents)
	r.checkResources(ms[:2], base)
	// The members' logs go first and the report last: a CI log that keeps
	// only its tail keeps the violations.
	if r.failed() {
		for _, m := range ms {
			fmt.Fprintf(os.Stderr, "--- member %s's log, last lines:\n%s\n", m.name, m.logTail(30))
		}
	}
	r.print(os.Stdout, time.Since(start))
	if r.failed() {
		return 1
	}
	return 0
}

// startFleet starts members a, b and c, each joining the others, and
// waits (at most 20s) until each sees all three.
func startFleet(work, bin string, parents []*parent, traces string) ([]*member, error) {
	var ms []*member
	for _, n := range []string{"a", "b", "c"} {
		m, err := newMember(work, n, bin, parents)
		if err != nil {
			return ms, err
		}
		m.traces = traces
		ms = append(ms, m)
	}
	for _, m := range ms {
		for _, o := range ms {
			if o != m {
				m.join = append(m.join, o.gossip)
			}
		}
	}
	for _, m := range ms {
		if err := m.start(); err != nil {
			return ms, err
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, m := range ms {
		for m.fleetSize() != 3 {
			if time.Now().After(deadline) {
				return ms, fmt.Errorf("member %s sees %d members after 20s", m.name, m.fleetSize())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return ms, nil
}

// apply makes one run-level event happen; it returns once the fault is
// over (a killed parent or member is back).
func apply(ev planned, ms []*member, parents []*parent, bin string) error {
	switch ev.event {
	case killParent:
		p := parents[ev.target]
		p.kill()
		time.Sleep(ev.hold)
		return p.restart()
	case stallPeerd:
		if err := ms[0].signal(syscall.SIGSTOP); err != nil {
			return err
		}
		time.Sleep(ev.hold)
		return ms[0].signal(syscall.SIGCONT)
	case reload:
		return ms[0].reload()
	case upgrade:
		return ms[0].upgrade(bin, parents[ev.target].name)
	case killMember:
		ms[2].kill()
		time.Sleep(ev.hold)
		return ms[2].start()
	case stopMember:
		ms[2].stop()
		time.Sleep(ev.hold)
		return ms[2].start()
	case unreachOrigin, loseNextHop:
		p := parents[ev.target]
		p.beyond(ev.event, true)
		time.Sleep(ev.hold)
		p.beyond(ev.event, false)
	}
	return nil
}
