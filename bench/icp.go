package main

// This file holds the ICP section: asking a sibling by ICP and by HTTP
// only-if-cached.

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/peerd/peerd/icp"
	"github.com/peerd/peerd/internal/testbed"
)

// ICPRow is one way of asking a sibling whether it holds a URL: an ICP
// query, or an HTTP GET with Cache-Control: only-if-cached (keep-alive).
type ICPRow struct {
	Sibling string  `json:"sibling"`
	How     string  `json:"how"`
	N       int     `json:"n"`
	P50us   float64 `json:"p50_us"`
	P99us   float64 `json:"p99_us"`
	Errors  int     `json:"errors"`
}

const icpRounds = 2000

// icpRun asks a Squid sibling and a peerd sibling, which both hold the
// URL, icpRounds times each way.
func icpRun(work, peerdBin, squidBin string) []ICPRow {
	up, err := testbed.NewParent("up", *size)
	must(err)
	defer up.Close()
	up.SetHeader("Cache-Control", "max-age=3600")
	var rows []ICPRow

	if squidBin != "" {
		dir, _ := os.MkdirTemp(work, "squid-icp-")
		port := freeUDP()
		sq, err := testbed.StartSquid(squidBin, dir, testbed.SquidOptions{Name: "squid-icp", NoAccessLog: true, Extra: fmt.Sprintf(
			"icp_port %s\nudp_incoming_address 127.0.0.1\nacl loopback src 127.0.0.0/8\nicp_access allow loopback\n"+
				"cache_peer 127.0.0.1 parent %s 0 no-query default name=up\nnever_direct allow all\n", port, up.Port())})
		must(err)
		rows = append(rows, askBothWays("squid", sq.Addr, "127.0.0.1:"+port)...)
		sq.Kill()
	}

	port := freeUDP()
	dir, _ := os.MkdirTemp(work, "peerd-icp-")
	cfg := fmt.Sprintf("[proxy]\nlisten = \"127.0.0.1:0\"\nname = \"peerd-icp\"\ndirect = \"never\"\n[admin]\nlisten = \"127.0.0.1:0\"\n[log]\nlevel = \"info\"\n"+
		"[icp]\nlisten = \"127.0.0.1:%s\"\n[[peer]]\nname = \"up\"\nhost = \"127.0.0.1\"\nport = %s\n", port, up.Port())
	pd, err := testbed.StartPeerd(peerdBin, dir, cfg)
	must(err)
	rows = append(rows, askBothWays("peerd", pd.Proxy, "127.0.0.1:"+port)...)
	pd.Stop()
	return rows
}

func freeUDP() string {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	must(err)
	defer c.Close()
	return portOf(c.LocalAddr().String())
}

// askBothWays primes the sibling with the URL, then times ICP queries
// (from 127.0.0.2: Squid ignores ICP from its own address) and HTTP
// only-if-cached requests.
func askBothWays(name, httpAddr, icpAddr string) []ICPRow {
	const u = "http://origin.bench/icp-object"
	cl := proxyClient(httpAddr, 5*time.Second)
	get := func(onlyIfCached bool) error {
		req, _ := http.NewRequest("GET", u, nil)
		if onlyIfCached {
			req.Header.Set("Cache-Control", "only-if-cached")
		}
		resp, err := cl.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	must(get(false))
	time.Sleep(100 * time.Millisecond)

	httpRow := ICPRow{Sibling: name, How: "HTTP GET only-if-cached (keep-alive)", N: icpRounds}
	var lat []time.Duration
	for i := 0; i < icpRounds; i++ {
		t0 := time.Now()
		if err := get(true); err != nil {
			httpRow.Errors++
			continue
		}
		lat = append(lat, time.Since(t0))
	}
	httpRow.P50us, httpRow.P99us = pctUs(lat)

	icpRow := ICPRow{Sibling: name, How: "ICP query (UDP)", N: icpRounds}
	to, err := net.ResolveUDPAddr("udp", icpAddr)
	must(err)
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	must(err)
	defer c.Close()
	buf := make([]byte, icp.MaxLen)
	lat = lat[:0]
	hits := 0
	for i := 0; i < icpRounds; i++ {
		q := icp.Message{Op: icp.OpQuery, ReqNum: uint32(i + 1), URL: []byte(u)}
		t0 := time.Now()
		c.WriteToUDP(q.Append(nil), to)
		c.SetReadDeadline(time.Now().Add(time.Second))
		var m icp.Message
		for {
			n, _, err := c.ReadFromUDP(buf)
			if err != nil {
				icpRow.Errors++
				break
			}
			if m.Parse(buf[:n]) == nil && m.ReqNum == q.ReqNum {
				lat = append(lat, time.Since(t0))
				if m.Op == icp.OpHit {
					hits++
				}
				break
			}
		}
	}
	icpRow.P50us, icpRow.P99us = pctUs(lat)
	if hits < len(lat) {
		icpRow.Errors += len(lat) - hits // answered, but not HIT
	}
	fmt.Fprintf(os.Stderr, "  %-6s ICP p50 %.0f µs p99 %.0f µs (errors %d); HTTP only-if-cached p50 %.0f µs p99 %.0f µs (errors %d)\n",
		name, icpRow.P50us, icpRow.P99us, icpRow.Errors, httpRow.P50us, httpRow.P99us, httpRow.Errors)
	return []ICPRow{icpRow, httpRow}
}

// pctUs is the p50 and p99 of lat in microseconds.
func pctUs(lat []time.Duration) (p50, p99 float64) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return 1000 * pctMs(lat, 0.5), 1000 * pctMs(lat, 0.99)
}

func (r *Results) icpSection() string {
	if len(r.ICP) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## 7. Asking a sibling that holds the URL: ICP against HTTP only-if-cached, %d sequential asks each\n\n", icpRounds)
	b.WriteString("| sibling | how | p50 µs | p99 µs | errors |\n|---|---|---:|---:|---:|\n")
	for _, x := range r.ICP {
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.0f | %d |\n", x.Sibling, x.How, x.P50us, x.P99us, x.Errors)
	}
	return b.String()
}
