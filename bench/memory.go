package main

// This file holds section 3, memory: RSS while relaying.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/peerd/peerd/internal/testbed"
)

// memory opens idle CONNECT tunnels through the child (direct to a local
// sink that accepts and holds) and reads the child's RSS.
func memory(work, kind, peerdBin, squidBin string) Memory {
	sink, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	defer sink.Close()
	var held sync.Map
	go func() {
		for {
			c, err := sink.Accept()
			if err != nil {
				return
			}
			held.Store(c, true)
		}
	}()
	var c *child
	if kind == "peerd" {
		c = startPeerd(work, peerdBin, nil, "")
	} else {
		c = startSquid(work, squidBin, nil)
	}
	defer c.stop()
	time.Sleep(300 * time.Millisecond)
	m := Memory{Child: kind, Tunnels: *tunnels, BaseMiB: testbed.RSSMiB(c.pid)}
	var clients []net.Conn
	defer func() {
		for _, cl := range clients {
			cl.Close()
		}
		held.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	open := 0
	for i := 0; i < *tunnels && ctx.Err() == nil; i++ {
		var d net.Dialer
		cl, err := d.DialContext(ctx, "tcp", c.addr)
		if err != nil {
			break
		}
		fmt.Fprintf(cl, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", sink.Addr(), sink.Addr())
		cl.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(cl), nil)
		if err != nil || resp.StatusCode != 200 {
			cl.Close()
			break
		}
		cl.SetReadDeadline(time.Time{})
		clients = append(clients, cl)
		open++
	}
	time.Sleep(time.Second)
	runtime.GC()
	m.Tunnels = open
	m.RSSMiB = testbed.RSSMiB(c.pid)
	if open > 0 {
		m.PerKiB = (m.RSSMiB - m.BaseMiB) * 1024 / float64(open)
	}
	fmt.Fprintf(os.Stderr, "  %-6s %d tunnels: RSS %.1f -> %.1f MiB (%.1f KiB each)\n", kind, open, m.BaseMiB, m.RSSMiB, m.PerKiB)
	return m
}
