package main

// This file holds the connections section: what idle clients cost each
// child, peerd beside Squid in the same run. For each count (10k and
// 50k, or as many as the descriptor limit allows: each side of a
// connection is a descriptor in some process), keep-alive connections
// from several loopback source addresses each make one request and go
// idle; then CONNECT tunnels to a sink in a process of its own each
// carry a line and go idle. After a settling time the child's RSS is
// read (per connection: over its RSS before), and every idle client
// speaks again: the errors are counted.

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/peerd/peerd/internal/testbed"
)

// ConnRow is one child at one count of one kind.
type ConnRow struct {
	Child    string  `json:"child"`
	Kind     string  `json:"kind"` // keep-alive, tunnel
	Asked    int     `json:"asked"`
	Open     int     `json:"open"`
	BaseMiB  float64 `json:"rss_base_mib"`
	RSSMiB   float64 `json:"rss_mib"`
	PerKiB   float64 `json:"kib_each"`
	FDs      int     `json:"descriptors"`
	Errors   int     `json:"errors_when_spoken_again"`
	Note     string  `json:"note,omitempty"`
	Settled  float64 `json:"settled_seconds"`
	FDsLimit uint64  `json:"descriptor_limit"`
	Stopped  string  `json:"stopped,omitempty"` // why fewer than asked opened
}

// connCounts are the idle clients asked for, each kind.
var connCounts = flag.String("conns", "10000,50000", "the connections section's counts of idle clients, comma-separated")

// connSettle is how long idle clients are left before the RSS is read.
const connSettle = 8 * time.Second

// sinkEnv runs the bench as the tunnels' sink: an echo server holding
// every connection, in a process of its own (its descriptors are not the
// clients').
const sinkEnv = "PEERD_BENCH_SINK"

// runSink is the sink process: it echoes on an ephemeral port, printed
// on stdout.
func runSink() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	fmt.Println(ln.Addr().String())
	for {
		c, err := ln.Accept()
		if err != nil {
			return // (retrying a failing accept at once would spin)
		}
		go func() {
			// A read and write loop: io.Copy between TCP connections
			// splices, and a splice waiting holds a pipe, two descriptors.
			defer c.Close()
			buf := make([]byte, 512)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					c.Write(buf[:n])
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// startSink starts the sink process; it returns its address and stop.
func startSink() (string, func()) {
	self, err := os.Executable()
	must(err)
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), sinkEnv+"=1")
	out, err := cmd.StdoutPipe()
	must(err)
	must(cmd.Start())
	addr, err := bufio.NewReader(out).ReadString('\n')
	must(err)
	return strings.TrimSpace(addr), func() { cmd.Process.Kill(); cmd.Wait() }
}

func openFDs(pid int) int {
	es, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(es)
}

func connectionsRun(work, peerdBin, squidBin string) []ConnRow {
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	origin, stopOrigin := noStoreOrigin("ok")
	defer stopOrigin()
	sink, stopSink := startSink()
	defer stopSink()
	var rows []ConnRow
	for _, f := range strings.Split(*connCounts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		must(err)
		for _, kind := range []string{"keep-alive", "tunnel"} {
			want := n
			// Each tunnel is two descriptors in the child, a keep-alive
			// connection one; the clients here hold one each.
			perChild := 1
			if kind == "tunnel" {
				perChild = 2
			}
			note := ""
			if most := int(lim.Cur)/perChild - 256; want > most {
				want, note = most, fmt.Sprintf("%d asked; the descriptor limit here is %d (hard, cannot be raised)", n, lim.Cur)
			}
			children := []string{"peerd"}
			if squidBin != "" {
				children = append(children, "squid")
			}
			for _, ch := range children {
				var c *child
				if ch == "peerd" {
					c = startPeerd(work, peerdBin, nil, "direct = \"always\"\nmax_connections = 120000\nmax_connections_per_source = 120000\n")
				} else {
					c = startSquidWith(work, squidBin, nil, "", fmt.Sprintf("max_filedescriptors %d\nclient_persistent_connections on\nacl benchsrc src 127.0.0.0/8\nhttp_access allow benchsrc\n", lim.Cur))
				}
				row := connRow(c, ch, kind, want, origin, sink)
				row.Asked, row.Note, row.FDsLimit = n, note, lim.Cur
				c.stop()
				fmt.Fprintf(os.Stderr, "  %-5s %-10s %6d of %6d open: RSS %.1f -> %.1f MiB, %.1f KiB each, %d descriptors, %d errors spoken again %s\n",
					ch, kind, row.Open, want, row.BaseMiB, row.RSSMiB, row.PerKiB, row.FDs, row.Errors, row.Stopped)
				rows = append(rows, row)
			}
		}
	}
	return rows
}

// noStoreOrigin serves body, not to be stored, to every request; it
// returns its address and what stops it.
func noStoreOrigin(body string) (string, func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	srv := &http.Server{Handler: noStore(body)}
	go srv.Serve(ln)
	return ln.Addr().String(), func() { srv.Close() }
}

// noStore answers body, not to be stored.
func noStore(body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		io.WriteString(w, body)
	})
}

type idleConn struct {
	c  net.Conn
	br *bufio.Reader
}

// connRow opens n idle clients of kind through c, reads its RSS, and has
// every one speak again.
func connRow(c *child, name, kind string, n int, origin, sink string) ConnRow {
	time.Sleep(300 * time.Millisecond)
	row := ConnRow{Child: name, Kind: kind, BaseMiB: testbed.RSSMiB(c.pid)}
	speak := func(ic *idleConn, i int) error {
		ic.c.SetDeadline(time.Now().Add(30 * time.Second))
		if kind == "tunnel" {
			line := fmt.Sprintf("line %d\n", i)
			io.WriteString(ic.c, line)
			got, err := ic.br.ReadString('\n')
			if err == nil && got != line {
				err = fmt.Errorf("echoed %q", got)
			}
			return err
		}
		fmt.Fprintf(ic.c, "GET http://%s/k%d HTTP/1.1\r\nHost: %s\r\n\r\n", origin, i, origin)
		resp, err := http.ReadResponse(ic.br, nil)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("%d", resp.StatusCode)
		}
		return nil
	}
	var conns []*idleConn
	defer func() {
		for _, ic := range conns {
			ic.c.Close()
		}
	}()
	for i := 0; i < n; i++ {
		src := fmt.Sprintf("127.0.%d.%d", 1+i/200%50, 2+i%200)
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		nc, err := d.Dial("tcp", c.addr)
		if err != nil {
			row.Stopped = err.Error()
			break
		}
		ic := &idleConn{c: nc, br: bufio.NewReader(nc)}
		if kind == "tunnel" {
			nc.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(nc, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", sink, sink)
			resp, err := http.ReadResponse(ic.br, nil)
			if err != nil || resp.StatusCode != 200 {
				row.Stopped = fmt.Sprint("CONNECT: ", err)
				if resp != nil {
					row.Stopped = "CONNECT: " + resp.Status
				}
				nc.Close()
				break
			}
		}
		if err := speak(ic, i); err != nil {
			row.Stopped = err.Error()
			nc.Close()
			break
		}
		conns = append(conns, ic)
	}
	row.Open = len(conns)
	start := time.Now()
	time.Sleep(connSettle)
	row.Settled = time.Since(start).Seconds()
	row.RSSMiB, row.FDs = testbed.RSSMiB(c.pid), openFDs(c.pid)
	if row.Open > 0 {
		row.PerKiB = (row.RSSMiB - row.BaseMiB) * 1024 / float64(row.Open)
	}
	for i, ic := range conns {
		if speak(ic, n+i) != nil {
			row.Errors++
		}
	}
	return row
}

func (r *Results) connectionsMarkdown() string {
	if len(r.Connections) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## 4b. Idle clients: RSS per idle keep-alive connection and per idle CONNECT tunnel, %s after the last one opened\n\n", connSettle)
	b.WriteString("| child | kind | open (of asked) | RSS before MiB | RSS idle MiB | KiB each | descriptors | errors when they speak again | note |\n|---|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, c := range r.Connections {
		note := c.Note
		if c.Stopped != "" {
			note = strings.TrimPrefix(note+"; stopped: "+c.Stopped, "; ")
		}
		fmt.Fprintf(&b, "| %s | %s | %d (%d) | %.1f | %.1f | %.1f | %d | %d | %s |\n", c.Child, c.Kind, c.Open, c.Asked, c.BaseMiB, c.RSSMiB, c.PerKiB, c.FDs, c.Errors, note)
	}
	return b.String()
}
