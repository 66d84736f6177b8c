package forwarding

import (
	"io"
	"net"
	"testing"
	"time"
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
	if got, _ := pl.get(time.Now(), time.Minute); got == nil || got.closedByPeer(time.Now()) {
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dial := func() (*upConn, net.Conn) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return newUpConn(c, &pool{}), s
	}
	// poll waits (bounded) for what the peer did to arrive.
	poll := func(c *upConn, want idleState) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for c.peek(time.Now()) != want {
			if time.Now().After(deadline) {
				t.Fatalf("peek = %d; want %d", c.peek(time.Now()), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	quiet, s1 := dial()
	defer s1.Close()
	defer quiet.close()
	if got := quiet.peek(time.Now()); got != idleOK {
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
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
}
