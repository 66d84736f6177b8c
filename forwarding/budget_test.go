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
