package main

// This file holds the fleet section: three peerds, one killed, with gossip
// and without.

import (
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/peerd/peerd/internal/testbed"
)

// FleetRow is one run of the fleet section: three peerds share three
// parents under 200 req/s; p1 is killed; how many client-request connects
// went to the dead parent, summed over the members.
type FleetRow struct {
	Gossip       bool  `json:"gossip"`
	Requests     int   `json:"requests"`
	ClientErrors int   `json:"client_errors"`
	LiveConnects int   `json:"live_connects_to_dead_parent"`
	PerMember    []int `json:"per_member"`
	Rounds       []int `json:"rounds"`
}

// fleetRun measures the fleet scenario rounds times with gossip and
// without, interleaved, and returns the medians.
func fleetRun(work, bin string, rounds int) []FleetRow {
	var with, without []FleetRow
	for i := 0; i < rounds; i++ {
		for _, g := range []bool{true, false} {
			r := fleetOnce(work, bin, g)
			fmt.Fprintf(os.Stderr, "  round %d gossip=%-5v live connects to dead p1 %d %v, errors %d of %d\n", i+1, g, r.LiveConnects, r.PerMember, r.ClientErrors, r.Requests)
			if g {
				with = append(with, r)
			} else {
				without = append(without, r)
			}
		}
	}
	return []FleetRow{medianFleet(with), medianFleet(without)}
}

func medianFleet(rs []FleetRow) FleetRow {
	sort.Slice(rs, func(i, j int) bool { return rs[i].LiveConnects < rs[j].LiveConnects })
	m := rs[len(rs)/2]
	for _, r := range rs {
		m.Rounds = append(m.Rounds, r.LiveConnects)
	}
	return m
}

func fleetOnce(work, bin string, gossip bool) FleetRow {
	ps := []*testbed.Parent{newParent("p1"), newParent("p2"), newParent("p3")}
	defer func() {
		for _, p := range ps {
			p.Close()
		}
	}()
	fleetExtra := func(name, join string) string {
		if !gossip {
			return fmt.Sprintf("name = %q\n", name)
		}
		return fmt.Sprintf("name = %q\n[fleet]\nbind = \"127.0.0.1:0\"\njoin = [%s]\n", name, join)
	}
	a := startPeerd(work, bin, hopsOf(ps), fleetExtra("a", ""))
	members := []*child{a}
	if gossip {
		join := gossipAddr(a)
		members = append(members, startPeerd(work, bin, hopsOf(ps), fleetExtra("b", join)), startPeerd(work, bin, hopsOf(ps), fleetExtra("c", join)))
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			var s struct{ Members []struct{ Node string } }
			getJSON("http://"+members[2].admin+"/fleet", &s)
			if len(s.Members) == 3 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	} else {
		members = append(members, startPeerd(work, bin, hopsOf(ps), fleetExtra("b", "")), startPeerd(work, bin, hopsOf(ps), fleetExtra("c", "")))
	}
	for _, m := range members {
		defer m.stop()
	}
	time.Sleep(300 * time.Millisecond) // first probe verdicts
	cls := make([]*http.Client, len(members))
	for i, m := range members {
		cls[i] = proxyClient(m.addr, 15*time.Second)
	}
	const rate, total = 200, 1000 // 5 s; p1 is killed at 2 s
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	var mu sync.Mutex
	var wg sync.WaitGroup
	row := FleetRow{Gossip: gossip}
	start := time.Now()
	killed := false
	for i := 0; i < total; i++ {
		<-tick.C
		if !killed && time.Since(start) >= 2*time.Second {
			ps[0].Kill()
			killed = true
		}
		wg.Add(1)
		go func(cl *http.Client) {
			defer wg.Done()
			ok := getOK(cl, target)
			mu.Lock()
			row.Requests++
			if !ok {
				row.ClientErrors++
			}
			mu.Unlock()
		}(cls[i%len(cls)])
	}
	wg.Wait()
	for _, m := range members {
		var st struct {
			ConnectFailures int `json:"connect_failures_total"`
			ProbeFailures   int `json:"probe_failures_total"`
		}
		getJSON("http://"+m.admin+"/peers/p1", &st)
		n := st.ConnectFailures - st.ProbeFailures
		row.PerMember = append(row.PerMember, n)
		row.LiveConnects += n
	}
	return row
}

// gossipAddr is a member's own gossip address from its GET /fleet,
// quoted for a join list.
func gossipAddr(m *child) string {
	var st struct {
		Node    string `json:"node"`
		Members []struct{ Node, Addr string }
	}
	getJSON("http://"+m.admin+"/fleet", &st)
	for _, x := range st.Members {
		if x.Node == st.Node {
			return fmt.Sprintf("%q", x.Addr)
		}
	}
	return ""
}

func (r *Results) fleetSection() string {
	if len(r.Fleet) != 2 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## 6. Fleet: three peerds, three parents, 200 req/s across the members; p1 killed at 2 s\n\n")
	b.WriteString("| members | requests | client errors | live connects to dead p1, summed (median) | per member | rounds |\n|---|---:|---:|---:|---|---|\n")
	for _, f := range r.Fleet {
		name := "without gossip"
		if f.Gossip {
			name = "with gossip ([fleet])"
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %v | %v |\n", name, f.Requests, f.ClientErrors, f.LiveConnects, f.PerMember, f.Rounds)
	}
	return b.String()
}
