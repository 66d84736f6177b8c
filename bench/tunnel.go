package main

// This file holds the tunnel section: the CPU a child spends per MiB
// carried through a CONNECT tunnel, peerd beside ATS and Squid (and,
// with -tunnelbase, another peerd binary) in one run, over interleaved
// rounds. Each round opens tunnels DIRECT to a loopback source that sends
// a fixed amount and closes; the child's CPU over the transfer is divided
// by the MiB carried.

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/peerd/peerd/internal/testbed"
)

var (
	tunnelMiB  = flag.Int("tunnelmib", 2048, "MiB carried through each child's tunnels per round")
	tunnelPar  = flag.Int("tunnelpar", 4, "tunnels open at once in the tunnel run")
	tunnelBase = flag.String("tunnelbase", "", "another peerd binary to measure beside this one in the tunnel run (e.g. a build of an older commit)")
)

// TunnelRow is one child's tunnel figures (medians over the rounds).
type TunnelRow struct {
	Child     string    `json:"child"`
	MiB       float64   `json:"mib_per_round"`
	MiBps     float64   `json:"mib_per_second"`
	CPUusMiB  float64   `json:"cpu_us_per_mib"`
	UserusMiB float64   `json:"cpu_user_us_per_mib"`
	Rounds    []float64 `json:"cpu_us_per_mib_rounds"`
}

// tunnelSource sends n bytes to every connection, then closes it.
func tunnelSource(n int64) (addr string, stop func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	chunk := make([]byte, 256<<10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(2 * time.Minute))
				for left := n; left > 0; {
					k, err := c.Write(chunk[:min(int64(len(chunk)), left)])
					if err != nil {
						return
					}
					left -= int64(k)
				}
			}()
		}
	}()
	return ln.Addr().String(), func() { ln.Close() }
}

// tunnelThrough carries par tunnels' worth of the source's bytes through
// the proxy at proxyAddr; it returns the bytes received.
func tunnelThrough(proxyAddr, dst string, par int) int64 {
	var total int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < par; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", proxyAddr, 5*time.Second)
			if err != nil {
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(2 * time.Minute))
			fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", dst, dst)
			br := bufio.NewReaderSize(c, 64<<10)
			resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
			if err != nil || resp.StatusCode != 200 {
				if err == nil {
					err = fmt.Errorf("%s", resp.Status)
				}
				fmt.Fprintf(os.Stderr, "  CONNECT through %s: %v\n", proxyAddr, err)
				return
			}
			n, _ := io.Copy(io.Discard, br)
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	return total
}

func tunnelRun(work, peerdBin, squidBin, atsBin string) []TunnelRow {
	per := int64(*tunnelMiB) << 20 / int64(*tunnelPar)
	src, stop := tunnelSource(per)
	defer stop()
	type target struct {
		name  string
		start func() *child
	}
	targets := []target{{"peerd", func() *child { return startPeerd(work, peerdBin, nil, "") }}}
	if *tunnelBase != "" {
		targets = append(targets, target{"peerd (" + *tunnelBase + ")", func() *child { return startPeerd(work, *tunnelBase, nil, "") }})
	}
	if atsBin != "" {
		targets = append(targets, target{"ats", func() *child { return startATS(work, atsBin, nil) }})
	}
	if squidBin != "" {
		targets = append(targets, target{"squid", func() *child { return startSquid(work, squidBin, nil) }})
	}
	type sample struct{ cpu, user, mib, secs float64 }
	runs := make([][]sample, len(targets))
	for round := 0; round < max(1, *rounds); round++ {
		for i, t := range targets {
			c := t.start()
			pinChild(c)
			time.Sleep(300 * time.Millisecond)
			tunnelThrough(c.addr, src, 1) // warm up
			u0, k0 := testbed.CPUSplit(c.pid)
			start := time.Now()
			n := tunnelThrough(c.addr, src, *tunnelPar)
			secs := time.Since(start).Seconds()
			u1, k1 := testbed.CPUSplit(c.pid)
			c.stop()
			mib := float64(n) / (1 << 20)
			if mib == 0 {
				fmt.Fprintf(os.Stderr, "  round %d %-8s carried nothing\n", round+1, t.name)
				continue
			}
			s := sample{cpu: float64(u1-u0+k1-k0) / float64(time.Microsecond) / mib, user: float64(u1-u0) / float64(time.Microsecond) / mib, mib: mib, secs: secs}
			runs[i] = append(runs[i], s)
			fmt.Fprintf(os.Stderr, "  round %d %-8s %6.0f MiB in %.2fs (%.0f MiB/s)  cpu %.0f µs/MiB (user %.0f)\n", round+1, t.name, mib, secs, mib/secs, s.cpu, s.user)
		}
	}
	var out []TunnelRow
	for i, t := range targets {
		ss := runs[i]
		if len(ss) == 0 {
			continue
		}
		sort.Slice(ss, func(a, b int) bool { return ss[a].cpu < ss[b].cpu })
		m := ss[len(ss)/2]
		row := TunnelRow{Child: t.name, MiB: m.mib, MiBps: m.mib / m.secs, CPUusMiB: m.cpu, UserusMiB: m.user}
		for _, s := range runs[i] {
			row.Rounds = append(row.Rounds, s.cpu)
		}
		out = append(out, row)
	}
	return out
}

// tunnelMarkdown is the tunnel section of the results.
func (r *Results) tunnelMarkdown() string {
	if len(r.Tunnel) == 0 {
		return ""
	}
	s := fmt.Sprintf("\n## CONNECT tunnels: CPU per MiB carried (%d tunnels at once, %d MiB per round, DIRECT to a loopback source; median of %d interleaved rounds)\n\n", *tunnelPar, *tunnelMiB, max(1, *rounds))
	s += "| child | MiB/s | CPU µs per MiB | of which user space | rounds (µs per MiB) |\n|---|---:|---:|---:|---|\n"
	var peerd float64
	for _, t := range r.Tunnel {
		if t.Child == "peerd" {
			peerd = t.CPUusMiB
		}
		s += fmt.Sprintf("| %s | %.0f | %.0f | %.0f | %s |\n", t.Child, t.MiBps, t.CPUusMiB, t.UserusMiB, fmtRounds(t.Rounds))
	}
	for _, t := range r.Tunnel {
		if t.Child != "peerd" && t.CPUusMiB > 0 && peerd > 0 {
			s += fmt.Sprintf("\npeerd / %s CPU per MiB = %.2f.", t.Child, peerd/t.CPUusMiB)
		}
	}
	return s + "\n"
}

func fmtRounds(rs []float64) string {
	s := ""
	for i, r := range rs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%.0f", r)
	}
	return s
}
