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
