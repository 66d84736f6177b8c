package forwarding

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestRetryBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newRetryBudget(0.2)
		// A full bucket allows a burst, then it is spent.
		n := 0
		for b.withdraw() {
			n++
		}
		if n != int(budgetCap) {
			t.Fatalf("burst of %d retries; want %v", n, budgetCap)
		}
		// Requests earn 0.2 retries each: 50 requests, 10 retries.
		for i := 0; i < 50; i++ {
			b.deposit()
		}
		n = 0
		for b.withdraw() {
			n++
		}
		if n != 10 {
			t.Fatalf("%d retries after 50 requests at 0.2; want 10", n)
		}
		// The floor: 10 per second even without traffic.
		time.Sleep(time.Second)
		n = 0
		for b.withdraw() {
			n++
		}
		if n != 10 {
			t.Fatalf("%d retries after 1s idle; want the 10/s floor", n)
		}
	})
}

// TestHedgeBudget: hedges are at most the ratio of the last 10 s of
// requests, one per 10 s is always allowed, "0" allows none, and the
// window moves on.
func TestHedgeBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b hedgeBudget
		if !b.take(0.02, time.Now()) || b.take(0.02, time.Now()) {
			t.Fatal("with no requests: want exactly the one hedge per window")
		}
		if b.take(0, time.Now()) || b.left(0, time.Now()) != 0 {
			t.Fatal(`"0" allowed a hedge`)
		}
		for i := 0; i < 1000; i++ {
			b.request(time.Now())
			if i%100 == 99 && i < 999 {
				time.Sleep(time.Second) // ten seconds of 100 requests
			}
		}
		// 1000 requests in the window at 2%: 20 hedges, one spent.
		if l := b.left(0.02, time.Now()); l != 19 {
			t.Fatalf("%d hedges left; want 19", l)
		}
		n := 0
		for b.take(0.02, time.Now()) {
			n++
		}
		if n != 19 {
			t.Fatalf("%d hedges taken; want 19", n)
		}
		// Ten seconds later the window is empty: the floor again.
		time.Sleep(11 * time.Second)
		if l := b.left(0.02, time.Now()); l != 1 {
			t.Fatalf("an empty window leaves %d; want the floor of 1", l)
		}
	})
}
