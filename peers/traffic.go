package peers

// This file holds a peer's traffic: what every request, connect and probe
// to it counts (requests in flight, connect outcomes and times, answers
// and their head times, hedges, bytes, the 15-minute series and the head
// times of the last seconds), apart from the registry's row. Its methods
// read it alone; the registry writes it as outcomes arrive.

import (
	"net/netip"
	"sync/atomic"
)

// Traffic is what requests, connects and probes to one peer count. Its
// counters are atomics, never written to the registry's rows.
type Traffic struct {
	// Written by every request sent to the peer. lastUsed is in Unix
	// nanoseconds, 0 for never.
	requests atomic.Int64
	inFlight atomic.Int64
	lastUsed atomic.Int64
	_        cacheLinePad

	// Connect and probe counters. dialing counts live connects pending;
	// hung is set by a connect that timed out or was pending past its
	// hedge delay, and cleared by one that succeeded (trial.go).
	dialing         atomic.Int32
	hung            atomic.Bool
	consecutive     atomic.Int64
	connects        atomic.Int64
	connectFailures atomic.Int64
	probes          atomic.Int64
	probeFailures   atomic.Int64

	// Times in Unix nanoseconds; 0 means never.
	lastFailure atomic.Int64
	lastSuccess atomic.Int64

	lastError atomic.Pointer[string]
	// reached is the address of the last successful connect.
	reached atomic.Pointer[netip.Addr]

	// Smoothed connect time and its mean deviation, float64 bits of
	// milliseconds (RFC 6298 style). Updates may race; they are statistics.
	srtt      atomic.Uint64
	rttvar    atomic.Uint64
	lastProbe atomic.Uint64 // RTT of the last successful probe, ms

	failures [failClasses]atomic.Int64 // connect failures by class
	// Answers (answers.go): consecutive failures, by class, hedges, and
	// the response-head times.
	answerConsec  atomic.Int64
	answerByClass [answerClasses]atomic.Int64
	hedged        atomic.Int64
	_             cacheLinePad
	answers       answerStats // locked by every answer
	_             cacheLinePad
	icp           ICPCounters
	// bytesSent and bytesReceived are the bytes of the requests sent to
	// the peer and of its answers relayed (peerd_peer_bytes_total).
	bytesSent, bytesReceived atomic.Int64
	// series is the last 15 minutes of requests, errors and head times.
	series series
	// recent are the head times of the last 10 s, judged against the
	// other parents' (relative.go).
	recent recentHeads
}
