package main

// This file holds section 6b, parents judged against each other: one of
// three round-robin parents answers every request 40 ms late while the
// others answer at once (slow), or every parent answers one request in
// ten 600 ms late (tail), for 14 s under 40 GET/s; peerd and Squid in one
// run. The row shows the slow parent's share of the last 7 s and how
// many requests the parents got per client request (hedges are extra
// load on parents).

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
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
