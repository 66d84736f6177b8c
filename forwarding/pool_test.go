package forwarding

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/peerd/peerd/dialer"
)

// TestPoolReapsConnectionsThePeerClosed: an idle connection whose peer
// went away is closed by the next expiry pass, not kept until
// pconn_timeout; a healthy one stays.
func TestPoolReapsConnectionsThePeerClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for i := 0; i < 2; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	pl := &pool{}
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		pl.put(newUpConn(c, pl), time.Now())
	}
	gone, kept := <-accepted, <-accepted
	defer kept.Close()
	gone.Close()
	// The FIN takes a moment to arrive; poll, bounded.
	deadline := time.Now().Add(5 * time.Second)
	for pl.expire(time.Now(), time.Minute, false) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the closed connection was not reaped")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got, _ := pl.get(time.Now(), time.Minute); got == nil || got.closedByPeer() {
		t.Fatal("the healthy connection did not stay")
	}
}

// TestTaskGroup: a closed group starts no more tasks, and its channel
// closes when the last running one ends.
func TestTaskGroup(t *testing.T) {
	var g taskGroup
	for i := 0; i < 2; i++ {
		if !g.add() {
			t.Fatal("an open group refused a task")
		}
	}
	ch := g.close()
	if g.add() {
		t.Fatal("a closed group took a task")
	}
	g.done()
	select {
	case <-ch:
		t.Fatal("closed with a task still running")
	default:
	}
	g.done()
	select {
	case <-ch:
	default:
		t.Fatal("not closed once the last task ended")
	}
	var empty taskGroup
	select {
	case <-empty.close():
	default:
		t.Fatal("an idle group's channel is not closed at once")
	}
}

// TestPeekStates: the look at an idle connection (a raw MSG_PEEK) tells a
// quiet connection from one the peer wrote to unasked and one it closed,
// and consumes nothing.
func TestPeekStates(t *testing.T) {
	dial := func() (*upConn, net.Conn) {
		c, s := tcpPair(t)
		return newUpConn(c, &pool{}), s
	}
	// poll waits (bounded) for what the peer did to arrive.
	poll := func(c *upConn, want idleState) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for c.peek() != want {
			if time.Now().After(deadline) {
				t.Fatalf("peek = %d; want %d", c.peek(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	quiet, s1 := dial()
	defer s1.Close()
	defer quiet.close()
	if got := quiet.peek(); got != idleOK {
		t.Fatalf("a quiet connection: peek = %d; want idleOK", got)
	}
	extra, s2 := dial()
	defer s2.Close()
	defer extra.close()
	s2.Write([]byte("HTTP/1.1 200 OK\r\n"))
	poll(extra, idleExtra)
	buf := make([]byte, 64)
	extra.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, _ := extra.nc.Read(buf); string(buf[:n]) != "HTTP/1.1 200 OK\r\n" {
		t.Fatalf("the peeked bytes were consumed: read %q", buf[:n])
	}
	closed, s3 := dial()
	defer closed.close()
	s3.Close()
	poll(closed, idleClosed)
}

// TestPoolReusesConnectionPastItsLastDeadline: the deadlines of a
// connection's last exchange stay in force while it sits idle. Once they
// have passed, the connection is still reused within pconn_timeout and
// kept by the reaper, and a short write on it works: a connection idle
// past its last first-byte timeout used to be closed as broken.
func TestPoolReusesConnectionPastItsLastDeadline(t *testing.T) {
	nc, s := tcpPair(t)
	pl := &pool{}
	c := newUpConn(nc, pl)
	defer c.close()
	pass := func() {
		past := time.Now().Add(-time.Millisecond)
		c.dl.setRead(past)
		c.dl.write = past
		c.nc.SetWriteDeadline(past)
	}
	pass()
	pl.put(c, time.Now())
	if n := pl.expire(time.Now(), time.Minute, false); n != 1 {
		t.Fatalf("the reaper kept %d connections; want the idle one", n)
	}
	pass()
	got, _ := pl.get(time.Now(), time.Minute)
	if got != c {
		t.Fatal("the idle connection was not reused after its last deadlines passed")
	}
	if _, err := got.nc.Write([]byte("ping")); err != nil {
		t.Fatalf("a short write on the reused connection: %v", err)
	}
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("the parent read %q, %v; want ping", buf, err)
	}
	// A deadline that has passed although the deadline cache says it has
	// not (the janitor's tick, and its idea of the time, can be late): the
	// peek does not depend on deadlines at all.
	pl.put(c, time.Now())
	c.nc.SetReadDeadline(time.Now().Add(-time.Millisecond))
	c.dl.read = time.Now().Add(time.Hour) // what the look believes is in force
	if n := pl.expire(time.Now(), time.Minute, false); n != 1 {
		t.Fatalf("the reaper kept %d connections after a deadline passed under the look; want the idle one", n)
	}
}

// tlsPair is a TLS connection pair over loopback TCP: the client side as
// an upConn (verifying a throwaway self-signed certificate), over a
// dialer.Socket when socket is set, and the server side.
func tlsPair(t *testing.T, socket bool) (*upConn, *tls.Conn) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	nc, sc := tcpPair(t)
	srv := tls.Server(sc, &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	cfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}
	cli := tls.Client(nc, cfg)
	if socket {
		cli = dialer.TLSClient(nc, cfg)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Handshake() }()
	if err := cli.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	c := newUpConn(cli, &pool{})
	t.Cleanup(func() { c.close(); srv.Close() })
	return c, srv
}

// TestPeekStatesTLS: the look at an idle TLS connection sees through the
// TLS layer. A quiet connection stays usable; an answer nobody asked for
// is found whether it waits on the socket or already inside the TLS layer
// (it came in the record of the last answer); a close_notify ends it.
// Over a dialer.Socket (as peerd dials) and over a plain TCP connection.
func TestPeekStatesTLS(t *testing.T) {
	for _, socket := range []bool{true, false} {
		t.Run(fmt.Sprintf("socket=%v", socket), func(t *testing.T) { peekStatesTLS(t, socket) })
	}
}

func peekStatesTLS(t *testing.T, socket bool) {
	// Quiet: reusable, and an exchange after the look works.
	quiet, s := tlsPair(t, socket)
	if got := quiet.peek(); got != idleOK {
		t.Fatalf("a quiet TLS connection: peek = %d; want idleOK", got)
	}
	go func() {
		buf := make([]byte, 4)
		if _, err := io.ReadFull(s, buf); err == nil {
			s.Write([]byte("pong"))
		}
	}()
	quiet.nc.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4)
	if _, err := quiet.nc.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(quiet.nc, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("after the look the connection read %q, %v", buf, err)
	}

	// Unsolicited bytes that arrive on the socket later.
	late, s2 := tlsPair(t, socket)
	s2.Write([]byte("HTTP/1.1 200 OK\r\n"))
	deadline := time.Now().Add(5 * time.Second)
	for late.peek() != idleExtra {
		if time.Now().After(deadline) {
			t.Fatal("an answer nobody asked for on an idle TLS connection was not seen")
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Unsolicited bytes in the record of the last answer: the answer was
	// read, its extra bytes wait inside the TLS layer.
	inside, s3 := tlsPair(t, socket)
	s3.Write([]byte("answerEXTRA"))
	inside.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(inside.nc, make([]byte, len("answer"))); err != nil {
		t.Fatal(err)
	}
	if got := inside.peek(); got != idleExtra {
		t.Fatalf("bytes held inside the TLS layer: peek = %d; want idleExtra", got)
	}

	// close_notify: the peer is done.
	closed, s4 := tlsPair(t, socket)
	s4.Close()
	deadline = time.Now().Add(5 * time.Second)
	for closed.peek() != idleClosed {
		if time.Now().After(deadline) {
			t.Fatal("a TLS connection the peer closed was not seen closed")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// tcpPair is a connected pair of loopback TCP connections, closed when
// the test ends.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if client, err = net.Dial("tcp", ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if server, err = ln.Accept(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}
