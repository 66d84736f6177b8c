package peers

// This file holds a peer's ICP counters and its byte counts.

import (
	"sync/atomic"
	"time"
)

// ICPCounters are a peer's ICP statistics (queries sent to it and what it
// answered), kept by the icp package's querier.
type ICPCounters struct {
	queries, hits, misses, timeouts, denied atomic.Int64
	rtt                                     atomic.Uint64 // float64 bits of the mean reply time, ms
}

// ICP returns the peer's ICP counters.
func (h *Health) ICP() *ICPCounters { return &h.icp }

// Query counts one query sent.
func (c *ICPCounters) Query() { c.queries.Add(1) }

// Timeout counts a query left unanswered.
func (c *ICPCounters) Timeout() { c.timeouts.Add(1) }

// Reply counts an answer: hit (HIT or HIT_OBJ), denied, or a miss of any
// kind, and folds its round trip into the mean (EWMA, 1/8).
func (c *ICPCounters) Reply(hit, denied bool, rtt time.Duration) {
	switch {
	case hit:
		c.hits.Add(1)
	case denied:
		c.denied.Add(1)
	default:
		c.misses.Add(1)
	}
	ms := float64(rtt) / float64(time.Millisecond)
	if old := loadFloat(&c.rtt); old == 0 {
		storeFloat(&c.rtt, ms)
	} else {
		storeFloat(&c.rtt, 0.875*old+0.125*ms)
	}
}

// Queries is the number of queries sent.
func (c *ICPCounters) Queries() int64 { return c.queries.Load() }

// MeanRTT is the mean ICP reply time; 0 before the first reply.
func (c *ICPCounters) MeanRTT() time.Duration { return msDuration(loadFloat(&c.rtt)) }

// ICPSnapshot is one read of a peer's ICP counters.
type ICPSnapshot struct {
	Queries, Hits, Misses, Timeouts, Denied int64
	MeanRTT                                 time.Duration
}

func (c *ICPCounters) snapshot() ICPSnapshot {
	return ICPSnapshot{Queries: c.queries.Load(), Hits: c.hits.Load(), Misses: c.misses.Load(),
		Timeouts: c.timeouts.Load(), Denied: c.denied.Load(), MeanRTT: c.MeanRTT()}
}

// AddBytes counts the bytes of one request sent to the peer and of its answer
// relayed to the client.
func (h *Health) AddBytes(sent, received int64) {
	h.bytesSent.Add(sent)
	h.bytesReceived.Add(received)
}
