package e2e

// Hand-overs no keep-alive client notices (issue 41): at a binary upgrade
// or a stop, an idle keep-alive connection is not closed under a client
// that may be sending on it; its next request is answered with
// Connection: close, and the client's next connection reaches the process
// that serves now.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// keepAliveLoad is 6 keep-alive clients, each asking every 10 ms (100
// requests a second) through proxy until stop is closed.
type keepAliveLoad struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	errs       []string
	wg         sync.WaitGroup
	stop       chan struct{}
}

func startKeepAliveLoad(t *testing.T, proxy, origin string) *keepAliveLoad {
	l := &keepAliveLoad{stop: make(chan struct{})}
	for c := range 6 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			// A client of its own, as curl or a browser: no request is
			// retried behind the test's back (Go's Transport would resend
			// a GET that met a closed connection, and hide the failure).
			var conn net.Conn
			var br *bufio.Reader
			defer func() {
				if conn != nil {
					conn.Close()
				}
			}()
			fail := func(err error) {
				l.failed.Add(1)
				l.mu.Lock()
				l.errs = append(l.errs, err.Error())
				l.mu.Unlock()
				if conn != nil {
					conn.Close()
					conn = nil
				}
			}
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				case <-tick.C:
				}
				if conn == nil {
					var err error
					if conn, err = net.DialTimeout("tcp", proxy, 5*time.Second); err != nil {
						conn = nil
						fail(err)
						continue
					}
					br = bufio.NewReader(conn)
				}
				conn.SetDeadline(time.Now().Add(10 * time.Second))
				target := fmt.Sprintf("http://%s/small/%d-%d", origin, c, i)
				if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, origin); err != nil {
					fail(err)
					continue
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					fail(fmt.Errorf("request %d on a kept-alive connection: %v", i, err))
					continue
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != 200 {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
				if err != nil {
					fail(err)
					continue
				}
				l.ok.Add(1)
				if resp.Close { // Connection: close: the next request on a new connection
					conn.Close()
					conn = nil
				}
			}
		}()
	}
	t.Cleanup(l.end)
	return l
}

func (l *keepAliveLoad) end() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

func (l *keepAliveLoad) check(t *testing.T, what string) {
	t.Helper()
	l.end()
	t.Logf("%s: %d requests, %d failed", what, l.ok.Load(), l.failed.Load())
	if n := l.failed.Load(); n > 0 {
		t.Fatalf("%s: %d of %d requests failed: %v", what, n, n+l.ok.Load(), l.errs[:min(5, len(l.errs))])
	}
	if l.ok.Load() < 500 {
		t.Fatalf("%s: only %d requests answered", what, l.ok.Load())
	}
}

// TestUpgradeKeepAliveClients: 6 keep-alive clients at 100 req/s each
// through SIGUSR2: none of their requests fails.
func TestUpgradeKeepAliveClients(t *testing.T) {
	origin := slowOrigin(t)
	u := startUpgradable(t, upgradeConfig)
	l := startKeepAliveLoad(t, u.proxy, origin)
	waitFor(t, "load running", 10*time.Second, func() bool { return l.ok.Load() > 100 })
	u.cmd.Process.Signal(syscall.SIGUSR2)
	waitFor(t, "the old process gone", 60*time.Second, func() bool {
		select {
		case <-u.exited:
			return true
		default:
			return false
		}
	})
	before := l.ok.Load()
	waitFor(t, "requests served by the new process", 10*time.Second, func() bool { return l.ok.Load() > before+600 })
	l.check(t, "through SIGUSR2")
}

// balancer is a load balancer's simplest form: each client connection is
// piped to the first backend that accepts one.
func balancer(t *testing.T, backends ...string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var up net.Conn
				for _, b := range backends {
					if up, err = net.Dial("tcp", b); err == nil {
						break
					}
				}
				if up == nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				go func() { io.Copy(c, up); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				<-done
				<-done
			}()
		}
	}()
	return ln.Addr().String()
}

// TestStopKeepAliveClients: two peerds behind a balancer; 6 keep-alive
// clients at 100 req/s each go on through a SIGTERM of the first, the
// second taking over: none of their requests fails.
func TestStopKeepAliveClients(t *testing.T) {
	origin := slowOrigin(t)
	a := startPeerd(t, directConfig)
	b := startPeerd(t, directConfig)
	l := startKeepAliveLoad(t, balancer(t, a.proxy, b.proxy), origin)
	waitFor(t, "load running", 10*time.Second, func() bool { return l.ok.Load() > 100 })
	a.signal(syscall.SIGTERM)
	waitFor(t, "the first peerd gone", 40*time.Second, func() bool {
		select {
		case <-a.exited:
			return true
		default:
			return false
		}
	})
	before := l.ok.Load()
	waitFor(t, "requests served by the second", 10*time.Second, func() bool { return l.ok.Load() > before+600 })
	l.check(t, "through SIGTERM")
}
