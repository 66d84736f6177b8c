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
		head = head[:0]
		for len(head) < 4 || string(head[len(head)-4:]) != string(headEnd) {
			line, err := cr.ReadSlice('\n')
			if err != nil {
				return
			}
			head = append(head, line...)
		}
		if _, err := u.Write(head); err != nil {
			return
		}
		answer = answer[:0]
		for len(answer) < 4 || string(answer[len(answer)-4:]) != string(headEnd) {
			line, err := ur.ReadSlice('\n')
			if err != nil {
				return
			}
			answer = append(answer, line...)
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
