package dialer

// This file holds Socket, the TCP connection under a TLS client
// connection, which a look at an idle connection can read through without
// touching the network.

import (
	"crypto/tls"
	"net"
	"os"
)

// Socket is the TCP connection under a TLS client connection. It reads as
// its *net.TCPConn does, except while Holding: then a read fails at once
// with os.ErrDeadlineExceeded (which crypto/tls takes as temporary, so the
// connection stays usable) instead of reading the socket. The look at an
// idle pooled TLS connection reads through the TLS layer that way to find
// what the layer already holds, with no system call and no deadline moved
// (done with a deadline in the past, it cost two timer updates per reuse).
type Socket struct {
	*net.TCPConn
	Holding bool
}

func (s *Socket) Read(p []byte) (int, error) {
	if s.Holding {
		return 0, os.ErrDeadlineExceeded
	}
	return s.TCPConn.Read(p)
}

// TLSClient is tls.Client over conn, through a Socket when conn is TCP.
func TLSClient(conn net.Conn, cfg *tls.Config) *tls.Conn {
	if tc, ok := conn.(*net.TCPConn); ok {
		conn = &Socket{TCPConn: tc}
	}
	return tls.Client(conn, cfg)
}
