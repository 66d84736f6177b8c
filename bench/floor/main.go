// Command floor is the benchmark's measuring stick, not a proxy: the least a
// forward proxy can do per keep-alive GET, in Go, in two shapes. The bench
// runs it beside peerd, ATS and Squid so that peerd's CPU per request can be
// read against what its I/O model costs by itself.
//
//	floor -loop goroutine PARENT  one goroutine per client connection, as peerd
//	floor -loop epoll PARENT      one thread reaping every socket per epoll_wait
//
// Each client connection gets one upstream connection of its own, dialled
// when the client connects. A request is a head without a body, copied to
// the parent unchanged; the answer must carry Content-Length and is copied
// back in one write. No parsing beyond that, no access control, no pool, no
// deadlines, no health, no logs: anything else closes the connection. It
// prints the address it listens on, then serves until killed.
//
// This file holds the command line and the framing both loops share.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
)

func main() {
	loop := flag.String("loop", "goroutine", "goroutine or epoll")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: floor [-loop goroutine|epoll] PARENT-ADDR")
		os.Exit(2)
	}
	parent, err := net.ResolveTCPAddr("tcp4", flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(2)
	}
	switch *loop {
	case "goroutine":
		err = goroutines(parent)
	case "epoll":
		err = epoll(parent)
	default:
		err = fmt.Errorf("-loop %q: want goroutine or epoll", *loop)
	}
	fmt.Fprintln(os.Stderr, "floor:", err)
	os.Exit(1)
}

var headEnd = []byte("\r\n\r\n")

// answerLen is the length of the answer at the start of b: its head and
// its Content-Length body. It is 0 while the head is incomplete and -1 when
// the answer has no usable Content-Length. It allocates nothing: a floor
// that allocated per answer would read higher than the least a proxy does.
func answerLen(b []byte) int {
	h := bytes.Index(b, headEnd)
	if h < 0 {
		return 0
	}
	head := b[:h+2] // every field line ends in CRLF
	for i := bytes.Index(head, crlf) + 2; i < len(head); {
		j := i + bytes.Index(head[i:], crlf)
		name, value, ok := bytes.Cut(head[i:j], []byte(":"))
		if ok && bytes.EqualFold(name, contentLength) {
			n, err := strconv.Atoi(string(bytes.TrimSpace(value)))
			if err != nil || n < 0 {
				return -1
			}
			return h + len(headEnd) + n
		}
		i = j + 2
	}
	return -1
}

var (
	crlf          = []byte("\r\n")
	contentLength = []byte("Content-Length")
)
