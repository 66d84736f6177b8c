package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peerd/peerd/internal/testbed"
)

func TestAnswerLen(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{
		{"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc", 41},
		{"HTTP/1.1 200 OK\r\ncontent-length:  0 \r\n\r\n", 40},
		{"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n", 0},               // head not whole yet
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", -1}, // not framed by length
		{"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", -1},
		{"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", -1},
	} {
		if got := answerLen([]byte(c.in)); got != c.want {
			t.Errorf("answerLen(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

// TestFloorsRelay runs each loop in front of a parent and sends keep-alive
// GETs through it: the bench's floor rows measure only if every request is
// relayed whole, on one client connection.
func TestFloorsRelay(t *testing.T) {
	par, err := testbed.NewParent("parent", 512)
	if err != nil {
		t.Fatal(err)
	}
	defer par.Close()
	bin := filepath.Join(t.TempDir(), "floor")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, loop := range []string{"goroutine", "epoll"} {
		t.Run(loop, func(t *testing.T) {
			cmd := exec.Command(bin, "-loop", loop, par.Addr)
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			addr, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			c, err := net.DialTimeout("tcp", strings.TrimSpace(addr), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			before := par.Requests()
			for i := range 3 {
				fmt.Fprintf(c, "GET http://origin.test/%d HTTP/1.1\r\nHost: origin.test\r\n\r\n", i)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("answer %d: %v", i, err)
				}
				body, err := io.ReadAll(resp.Body)
				if err != nil || resp.StatusCode != 200 || len(body) != 512 {
					t.Fatalf("answer %d: status %d, %d bytes, %v", i, resp.StatusCode, len(body), err)
				}
			}
			if n := par.Requests() - before; n != 3 {
				t.Errorf("parent saw %d requests, want 3", n)
			}
		})
	}
}

func TestAnswerLenAllocatesNothing(t *testing.T) {
	b := []byte("HTTP/1.1 200 OK\r\nServer: x\r\nContent-Type: text/plain\r\nContent-Length: 512\r\n\r\n")
	if n := testing.AllocsPerRun(100, func() { answerLen(b) }); n != 0 {
		t.Errorf("answerLen allocates %v times per answer; want 0", n)
	}
}
