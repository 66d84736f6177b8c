package main

// This file holds section 6b, parents judged against each other: one of
// three round-robin parents answers every request 40 ms late while the
// others answer at once (slow), or every parent answers one request in
// ten 600 ms late (tail), for 14 s under 40 GET/s; peerd and Squid in one
// run. The row shows the slow parent's share of the last 7 s and how
// many requests the parents got per client request (hedges are extra
// load on parents).

import (
	"flag"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/peerd/peerd/internal/testbed"
)

// RelativeRow is one child's run of one relative-latency phase.
type RelativeRow struct {
	Child        string `json:"child"`
	Phase        string `json:"phase"`
	Requests     int    `json:"requests"`
	ClientErrors int    `json:"client_errors"`
	// SlowShare is the slow parent's part of the GETs the parents got in
	// the last 7 s (slow phase only).
	SlowShare float64 `json:"slow_parent_share_last_7s"`
	// ParentPerClient is the GETs the parents got per client request
	// (above 1: hedges or retries).
	ParentPerClient float64 `json:"parent_gets_per_client_request"`
	P90Ms           float64 `json:"p90_ms"`
}

// relativeRun runs both phases for peerd and, when there is one, Squid.
func relativeRun(work, peerdBin, squidBin string) []RelativeRow {
	var rows []RelativeRow
	for _, phase := range []string{"slow", "tail"} {
		rows = append(rows, relativePhase(work, "peerd", peerdBin, phase))
		if squidBin != "" {
			rows = append(rows, relativePhase(work, "squid", squidBin, phase))
		}
	}
	return rows
}

func relativePhase(work, kind, bin, phase string) RelativeRow {
	ps, cl, stop := threeParents(work, kind, bin)
	defer stop()
	gets := func() []int {
		out := make([]int, len(ps))
		for i, p := range ps {
			out[i] = p.RequestsOf("GET")
		}
		return out
	}
	if phase == "slow" {
		ps[0].SetMode("delay:40ms")
	}
	start := gets()
	var half []int
	const rate, secs = 40, 14
	time.AfterFunc(secs*time.Second/2, func() { half = gets() })
	row := RelativeRow{Child: kind, Phase: phase}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var took []float64
	tick := time.NewTicker(time.Second / rate)
	for i := 0; i < rate*secs; i++ {
		<-tick.C
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			req, _ := http.NewRequest("GET", fmt.Sprintf("http://origin.bench/rel/%s/%d", phase, i), nil)
			if phase == "tail" && i%10 == 0 {
				req.Header.Set("X-Delay", "600ms") // the parents' tail, alike on every one
			}
			t0 := time.Now()
			ok := false
			if resp, err := cl.Do(req); err == nil {
				ok = resp.StatusCode == 200
				resp.Body.Close()
			}
			d := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			row.Requests++
			if !ok {
				row.ClientErrors++
			}
			took = append(took, float64(d)/float64(time.Millisecond))
		}(i)
	}
	tick.Stop()
	wg.Wait()
	end := gets()
	total, last, slowLast := 0, 0, 0
	for i := range ps {
		total += end[i] - start[i]
		last += end[i] - half[i]
	}
	slowLast = end[0] - half[0]
	if phase == "slow" && last > 0 {
		row.SlowShare = float64(slowLast) / float64(last)
	}
	row.ParentPerClient = float64(total) / float64(max(row.Requests, 1))
	slices.Sort(took)
	if len(took) > 0 {
		row.P90Ms = took[len(took)*9/10]
	}
	return row
}

func (r *Results) relativeSection() string {
	if len(r.Relative) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## 6b. Parents judged against each other: one of three parents 40 ms late on every answer (slow), or every parent 600 ms late on one answer in ten (tail), 14 s at 40 GET/s\n\n")
	b.WriteString("| child | phase | requests | client errors | slow parent's share of the last 7 s | parent GETs per client request | p90 ms |\n|---|---|---:|---:|---:|---:|---:|\n")
	for _, g := range r.Relative {
		share := "—"
		if g.Phase == "slow" {
			share = fmt.Sprintf("%.1f %%", 100*g.SlowShare)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %s | %.3f | %.0f |\n", g.Child, g.Phase, g.Requests, g.ClientErrors, share, g.ParentPerClient, g.P90Ms)
	}
	return b.String()
}

// RelativeLoadRow is three equal parents under a host with both cores
// busy: how often one of them was made suspect for being slower than its
// peers (it never should be: the difference is the host's, not theirs).
type RelativeLoadRow struct {
	Seconds      float64        `json:"seconds"`
	Requests     int            `json:"requests"`
	ClientErrors int            `json:"client_errors"`
	Suspicions   int            `json:"suspicions"`
	Shares       map[string]int `json:"requests_by_parent"`
}

var relLoadFor = flag.Duration("relload", 10*time.Minute, "how long the relload section runs")

// relativeLoadRun runs 40 GET/s through peerd to three equal parents for
// relLoadFor while two busy loops keep both cores busy, and counts the
// parents' suspicions (history entries to suspect, or cause outlier).
func relativeLoadRun(work, peerdBin string) RelativeLoadRow {
	ps := []*testbed.Parent{newParent("p1"), newParent("p2"), newParent("p3")}
	defer func() {
		for _, p := range ps {
			p.Close()
		}
	}()
	c := startPeerd(work, peerdBin, hopsOf(ps), `read_timeout = "10s"`)
	defer c.stop()
	for i := 0; i < 2; i++ {
		burn := exec.Command("sh", "-c", "while :; do :; done")
		must(burn.Start())
		defer burn.Process.Kill()
	}
	cl := proxyClient(c.addr, 15*time.Second)
	row := RelativeLoadRow{Shares: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	tick := time.NewTicker(time.Second / 40)
	for i := 0; time.Since(start) < *relLoadFor; i++ {
		<-tick.C
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ok := getOK(cl, fmt.Sprintf("http://origin.bench/relload/%d", i))
			mu.Lock()
			row.Requests++
			if !ok {
				row.ClientErrors++
			}
			mu.Unlock()
		}(i)
	}
	tick.Stop()
	wg.Wait()
	row.Seconds = time.Since(start).Seconds()
	for _, p := range ps {
		row.Shares[p.Name] = p.RequestsOf("GET")
		var h struct {
			Transitions []struct{ To, Cause string }
		}
		if adminGet(c.admin, "/peers/"+p.Name+"/history", &h) == nil {
			for _, t := range h.Transitions {
				if t.To == "suspect" || t.Cause == "outlier" {
					row.Suspicions++
				}
			}
		}
	}
	return row
}

func (r *Results) relativeLoadSection() string {
	if r.RelativeLoad == nil {
		return ""
	}
	g := r.RelativeLoad
	return fmt.Sprintf("\n## 6e. Three equal parents on a host with both cores busy, %.0f s at 40 GET/s\n\n| requests | client errors | suspicions | requests by parent |\n|---:|---:|---:|---|\n| %d | %d | %d | %v |\n",
		g.Seconds, g.Requests, g.ClientErrors, g.Suspicions, g.Shares)
}
