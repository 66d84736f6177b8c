package main

// This file holds section 6, gray failures: one of three round-robin
// parents accepts connections but hangs, or answers 3 s late, for 6 s
// under 40 GET/s, then recovers; peerd and Squid in one run. Squid's
// child keeps sending that parent its share; peerd hedges, kills it by its
// answers and revives it by an HTTP probe.

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peerd/peerd/internal/testbed"
)

// GrayRow is one child's run of one gray-failure phase.
type GrayRow struct {
	Child        string  `json:"child"`
	Phase        string  `json:"phase"`
	Requests     int     `json:"requests"`
	ClientErrors int     `json:"client_errors"`
	Over1s       int     `json:"over_1s"`
	MaxMs        float64 `json:"max_ms"`
	// ReachedAfter1s counts client requests that reached the faulty
	// parent after the first second of its fault.
	ReachedAfter1s int `json:"reached_sick_parent_after_1s"`
}

// grayRun runs every phase for peerd and, when there is one, Squid.
func grayRun(work, peerdBin, squidBin string) []GrayRow {
	var rows []GrayRow
	for _, phase := range []string{"hang", "slow"} {
		rows = append(rows, grayPhase(work, "peerd", peerdBin, phase))
		if squidBin != "" {
			rows = append(rows, grayPhase(work, "squid", squidBin, phase))
		}
	}
	return rows
}

// threeParents starts three round-robin parents and a child of kind
// (peerd or squid) in front of them, and warms it up so that every
// parent's answers are known; stop ends them all.
func threeParents(work, kind, bin string) (ps []*testbed.Parent, cl *http.Client, stop func()) {
	ps = []*testbed.Parent{newParent("p1"), newParent("p2"), newParent("p3")}
	var c *child
	if kind == "peerd" {
		c = startPeerd(work, bin, hopsOf(ps), `read_timeout = "10s"`)
	} else {
		c = startSquid(work, bin, hopsOf(ps))
	}
	cl = proxyClient(c.addr, 15*time.Second)
	for i := 0; i < 150; i++ {
		getOK(cl, fmt.Sprintf("http://origin.bench/warm/%d", i))
	}
	return ps, cl, func() {
		c.stop()
		for _, p := range ps {
			p.Close()
		}
	}
}

func grayPhase(work, kind, bin, phase string) GrayRow {
	ps, cl, stop := threeParents(work, kind, bin)
	defer stop()
	sick := ps[0]
	switch phase {
	case "hang":
		sick.SetMode("silent")
	default:
		sick.SetMode("delay:3s")
	}
	row := GrayRow{Child: kind, Phase: phase}
	var gets atomic.Int64
	gets.Store(-1)
	time.AfterFunc(time.Second, func() { gets.Store(int64(sick.RequestsOf("GET"))) })
	var mu sync.Mutex
	var wg sync.WaitGroup
	const rate, secs = 40, 6
	tick := time.NewTicker(time.Second / rate)
	for i := 0; i < rate*secs; i++ {
		<-tick.C
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			t0 := time.Now()
			ok := getOK(cl, fmt.Sprintf("http://origin.bench/gray/%s/%d", phase, i))
			d := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			row.Requests++
			if !ok {
				row.ClientErrors++
			}
			if d > time.Second {
				row.Over1s++
			}
			row.MaxMs = max(row.MaxMs, float64(d)/float64(time.Millisecond))
		}(i)
	}
	tick.Stop()
	row.ReachedAfter1s = sick.RequestsOf("GET") - int(gets.Load())
	wg.Wait()
	return row
}

func (r *Results) graySection() string {
	if len(r.Gray) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## 6. Gray failures: one of three parents accepts but hangs (or answers 3 s late) for 6 s, 40 GET/s\n\n")
	b.WriteString("| child | phase | requests | client errors | over 1 s | max ms | requests reaching the sick parent after its first second |\n|---|---|---:|---:|---:|---:|---:|\n")
	for _, g := range r.Gray {
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %.0f | %d |\n", g.Child, g.Phase, g.Requests, g.ClientErrors, g.Over1s, g.MaxMs, g.ReachedAfter1s)
	}
	return b.String()
}
