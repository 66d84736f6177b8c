package main

// This file holds section 2, failover: a parent killed or black-holed
// under load, and how each child notices and routes around it.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/peerd/peerd/internal/testbed"
)

type sample struct {
	at  time.Time
	lat time.Duration
	ok  bool
}

// failover runs 200 req/s through a child with three parents; at 2s one
// parent is killed (or black-holed), at 6s it comes back; the run ends at
// 10s (plus up to 5s for a revival verdict).
func failover(work, kind, peerdBin, squidBin, how string) Failover {
	ps := []*testbed.Parent{newParent("p1"), newParent("p2"), newParent("p3")}
	defer func() {
		for _, p := range ps {
			p.Close()
		}
	}()
	var c *child
	if kind == "peerd" {
		c = startPeerd(work, peerdBin, hopsOf(ps), "")
		time.Sleep(300 * time.Millisecond)
	} else {
		c = startSquid(work, squidBin, hopsOf(ps))
		time.Sleep(500 * time.Millisecond)
	}
	defer c.stop()
	victim := ps[0]
	cl := proxyClient(c.addr, 15*time.Second)
	var mu sync.Mutex
	var samples []sample
	var wg sync.WaitGroup
	const rate = 200
	total := 10 * rate
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	t0 := time.Now()
	var killedAt, backAt time.Time
	f := Failover{Child: kind, Scenario: how, LiveAttempts: "n/a", RevivalMs: -1}
	var detectedAt, revivedAt, lastUnhealthy time.Time
	var phaseMu sync.Mutex
	// peerd: detection is the moment the victim stops getting new traffic
	// (suspect or dead); revival the moment it is alive and healthy again.
	// Polled every 5ms; the gap is allowed for below.
	const pollEvery = 5 * time.Millisecond
	pollDone := make(chan struct{})
	pollStop := make(chan struct{})
	go func() {
		defer close(pollDone)
		if kind != "peerd" {
			return
		}
		for {
			select {
			case <-pollStop:
				return
			case <-time.After(pollEvery):
			}
			phaseMu.Lock()
			k, b := killedAt, backAt
			phaseMu.Unlock()
			if k.IsZero() {
				continue
			}
			sent := time.Now()
			st, suspect := peerState(c.admin, victim.Name)
			now := time.Now()
			phaseMu.Lock()
			unhealthy := st == "dead" || suspect
			if detectedAt.IsZero() && unhealthy {
				detectedAt = now
			}
			if !b.IsZero() && unhealthy {
				// After the restart the victim only gets healthier, so it
				// was held dead/suspect all along until this query was sent.
				lastUnhealthy = sent
			}
			if !b.IsZero() && revivedAt.IsZero() && st == "alive" && !suspect {
				revivedAt = now
			}
			done := !revivedAt.IsZero()
			phaseMu.Unlock()
			if done {
				return
			}
		}
	}()
	var beforeBack int64
	for i := 0; i < total; i++ {
		<-tick.C
		el := time.Since(t0)
		if killedAt.IsZero() && el >= 2*time.Second {
			if how == "kill" {
				victim.Kill()
			} else {
				must(victim.Blackhole())
			}
			phaseMu.Lock()
			killedAt = time.Now()
			phaseMu.Unlock()
		}
		if backAt.IsZero() && el >= 6*time.Second {
			beforeBack = victim.Requests()
			must(victim.Restart())
			phaseMu.Lock()
			backAt = time.Now()
			phaseMu.Unlock()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := sample{at: time.Now()}
			s.ok = getOK(cl, target)
			s.lat = time.Since(s.at)
			mu.Lock()
			samples = append(samples, s)
			mu.Unlock()
		}()
	}
	wg.Wait()
	// Wait (bounded) for a revival verdict.
	select {
	case <-pollDone:
	case <-time.After(5 * time.Second):
	}
	close(pollStop)
	<-pollDone
	phaseMu.Lock()
	defer phaseMu.Unlock()
	if kind == "squid" {
		detectedAt, revivedAt = squidTimes(filepath.Join(c.dir, "cache.log"), victim.Name, killedAt, backAt)
	}
	afterBack := victim.Requests() - beforeBack
	if !revivedAt.IsZero() {
		f.RevivalMs = float64(revivedAt.Sub(backAt)) / float64(time.Millisecond)
		// Requests the restarted parent got while the child still held it
		// dead or suspect: for peerd, before the last query that still saw
		// it so; for Squid, before the second of its REVIVED log line
		// (1s resolution, so a lower bound).
		cut := lastUnhealthy
		if kind == "squid" {
			cut = revivedAt
		}
		f.ReachedDead = victim.ArrivalsBefore(cut)
	}
	f.RevivedTraffic = afterBack > 0
	if !detectedAt.IsZero() {
		f.DetectionMs = float64(detectedAt.Sub(killedAt)) / float64(time.Millisecond)
	}
	var outage []time.Duration
	for _, s := range samples {
		f.Requests++
		if !s.ok {
			f.ClientErrors++
		}
		if s.lat > 100*time.Millisecond {
			f.Slow100ms++
		}
		f.MaxMs = max(f.MaxMs, float64(s.lat)/float64(time.Millisecond))
		if !s.at.Before(killedAt) && s.at.Before(backAt) {
			outage = append(outage, s.lat)
		}
	}
	sort.Slice(outage, func(i, j int) bool { return outage[i] < outage[j] })
	f.OutageP99ms = pctMs(outage, 0.99)
	if kind == "peerd" {
		var st struct {
			ConnectFailures int `json:"connect_failures_total"`
			ProbeFailures   int `json:"probe_failures_total"`
		}
		getJSON("http://"+c.admin+"/peers/"+victim.Name, &st)
		f.LiveAttempts = strconv.Itoa(st.ConnectFailures - st.ProbeFailures)
	}
	fmt.Fprintf(os.Stderr, "  %-6s %-9s errors %d, >100ms %d, outage p99 %.1f ms, live connects to dead %s, detect %.0f ms, revive %.0f ms\n",
		kind, how, f.ClientErrors, f.Slow100ms, f.OutageP99ms, f.LiveAttempts, f.DetectionMs, f.RevivalMs)
	return f
}

func peerState(admin, name string) (string, bool) {
	var st struct {
		State   string `json:"state"`
		Suspect bool   `json:"suspect"`
	}
	getJSON("http://"+admin+"/peers/"+name, &st)
	return st.State, st.Suspect
}

func getJSON(u string, v any) {
	resp, err := http.Get(u)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	json.NewDecoder(resp.Body).Decode(v)
}

// squidTimes reads Squid's DEAD/REVIVED lines for the peer from cache.log.
func squidTimes(path, name string, killed, back time.Time) (dead, revived time.Time) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if len(l) < 19 {
			continue
		}
		ts, err := time.ParseInLocation("2006/01/02 15:04:05", l[:19], time.Local)
		if err != nil {
			continue
		}
		// Second resolution: a death is no later than the end of its
		// second, a revival no earlier than its start.
		switch {
		case strings.Contains(l, "Detected DEAD Parent: "+name) && dead.IsZero() && ts.After(killed.Add(-time.Second)):
			dead = ts.Add(time.Second)
		case strings.Contains(l, "Detected REVIVED Parent: "+name) && revived.IsZero() && ts.After(back.Add(-time.Second)):
			revived = ts
		}
	}
	return
}
