package main

// This file holds the goroutine-per-connection floor: peerd's I/O model with
// none of its work.

import (
	"bufio"
	"fmt"
	"io"
	"net"
)

func goroutines(parent *net.TCPAddr) error {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go relay(c, parent)
	}
}

// relay serves one client connection over an upstream connection of its own.
func relay(c net.Conn, parent *net.TCPAddr) {
	defer c.Close()
	u, err := net.DialTCP("tcp4", nil, parent)
	if err != nil {
		return
	}
	defer u.Close()
	cr, ur := bufio.NewReaderSize(c, 4096), bufio.NewReaderSize(u, 4096)
	head, answer := make([]byte, 0, 4096), make([]byte, 0, 8192)
	for {
		if head, err = readHead(cr, head[:0]); err != nil {
			return
		}
		if _, err := u.Write(head); err != nil {
			return
		}
		if answer, err = readHead(ur, answer[:0]); err != nil {
			return
		}
		n := answerLen(answer)
		if n < 0 {
			return
		}
		have := len(answer)
		answer = append(answer, make([]byte, n-have)...)
		if _, err := io.ReadFull(ur, answer[have:]); err != nil {
			return
		}
		if _, err := c.Write(answer); err != nil {
			return
		}
	}
}

// readHead appends a message head from r to dst, up to and with its
// empty line.
func readHead(r *bufio.Reader, dst []byte) ([]byte, error) {
	for len(dst) < 4 || string(dst[len(dst)-4:]) != string(headEnd) {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return dst, err
		}
		dst = append(dst, line...)
	}
	return dst, nil
}
