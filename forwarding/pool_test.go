package forwarding

import (
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
