package forwarding

// This file holds the retry budget: retries bounded to a share of requests.

import (
	"sync"
	"sync/atomic"
	"time"
)

// retryBudget caps after-write and status retries to a share of requests,
// with a floor of 10 per second so a quiet proxy can still retry. Tokens
// are counted in thousandths so that shares add up exactly. Every request
// deposits, so that path is a lock-free compare-and-swap; only a retry,
// which is rare, takes the mutex to refill by time.
type retryBudget struct {
	ratio  atomic.Int64 // thousandths of a retry earned per request
	tokens atomic.Int64 // thousandths

	mu   sync.Mutex // guards last and serialises withdrawals
	last time.Time
}

const (
	budgetMinPerSec = 10
	budgetCap       = 100
	milli           = 1000
)

func newRetryBudget(ratio float64) *retryBudget {
	b := &retryBudget{}
	b.tokens.Store(budgetCap * milli)
	b.setRatio(ratio)
	return b
}

func (b *retryBudget) setRatio(r float64) { b.ratio.Store(int64(r*milli + 0.5)) }

// add credits d thousandths, never above the cap.
func (b *retryBudget) add(d int64) {
	for {
		cur := b.tokens.Load()
		next := min(budgetCap*milli, cur+d)
		if next == cur || b.tokens.CompareAndSwap(cur, next) {
			return
		}
	}
}

func (b *retryBudget) deposit() { b.add(b.ratio.Load()) }

// refillLocked credits the time-based floor since the last refill.
func (b *retryBudget) refillLocked() {
	now := time.Now()
	if !b.last.IsZero() {
		// Beyond a minute the bucket is full anyway; the bound also keeps
		// the product from overflowing after days of quiet.
		el := min(now.Sub(b.last), time.Minute)
		b.add(int64(el) * budgetMinPerSec * milli / int64(time.Second))
	}
	b.last = now
}

// available reports whether a retry could be withdrawn now.
func (b *retryBudget) available() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked()
	return b.tokens.Load() >= milli
}

func (b *retryBudget) withdraw() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked()
	for {
		cur := b.tokens.Load()
		if cur < milli {
			return false
		}
		if b.tokens.CompareAndSwap(cur, cur-milli) {
			return true
		}
	}
}
