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

// allows reports whether a retry could be withdrawn now (an allowance,
// for decide's step).
func (b *retryBudget) allows() bool {
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

// hedgeBudget bounds hedged requests (contract section 21): at most ratio
// of the requests of the last hedgeWindow, and one per window whatever the
// traffic. Requests and hedges are counted in one-second buckets; every
// request adds to its bucket lock-free, and a hedge, which is rare, takes
// the mutex.
type hedgeBudget struct {
	reqs   [hedgeBuckets]atomic.Int64
	hedges [hedgeBuckets]atomic.Int64
	stamp  [hedgeBuckets]atomic.Int64 // the second each bucket counts (Unix s)
	mu     sync.Mutex
}

const (
	hedgeBuckets = 10 // seconds: the window is the last 10 s
)

// bucket is the bucket of second sec, emptied when it last counted an
// older second.
func (b *hedgeBudget) bucket(sec int64) int {
	k := int(sec % hedgeBuckets)
	if old := b.stamp[k].Load(); old != sec && b.stamp[k].CompareAndSwap(old, sec) {
		b.reqs[k].Store(0)
		b.hedges[k].Store(0)
	}
	return k
}

// request counts a request forwarded at now.
func (b *hedgeBudget) request(now time.Time) { b.reqs[b.bucket(now.Unix())].Add(1) }

// window is the requests and hedges of the last hedgeBuckets seconds.
func (b *hedgeBudget) window(now time.Time) (reqs, hedges int64) {
	sec := now.Unix()
	for k := range hedgeBuckets {
		if s := b.stamp[k].Load(); s > sec-hedgeBuckets && s <= sec {
			reqs += b.reqs[k].Load()
			hedges += b.hedges[k].Load()
		}
	}
	return reqs, hedges
}

// left is how many hedges ratio allows now.
func (b *hedgeBudget) left(ratio float64, now time.Time) int64 {
	if ratio <= 0 {
		return 0
	}
	reqs, hedges := b.window(now)
	allowed := max(1, int64(ratio*float64(reqs)))
	return max(0, allowed-hedges)
}

// take spends one hedge if ratio allows it now.
func (b *hedgeBudget) take(ratio float64, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.left(ratio, now) <= 0 {
		return false
	}
	b.hedges[b.bucket(now.Unix())].Add(1)
	return true
}

// giveBack returns a hedge taken at now that was never sent.
func (b *hedgeBudget) giveBack(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if k := b.bucket(now.Unix()); b.hedges[k].Load() > 0 {
		b.hedges[k].Add(-1)
	}
}
