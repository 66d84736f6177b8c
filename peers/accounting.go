package peers

// This file holds Accounting: what the engine tells the health of next
// hops about the requests it sends them. *Registry is one; the fleet
// wraps it (fleet.Accounting) to keep its members' part.

import "time"

// Accounting tracks in-flight requests per peer and hears of slow
// connects, of answers and of late heads; *Registry is one.
type Accounting interface {
	BeginRequest(p *Peer, now time.Time) bool
	EndRequest(p *Peer)
	MarkSlow(p *Peer)
	// ObserveAnswerFrom reports how a parent answered a request written
	// to it whole, for an origin (OriginHash of its host; of the key,
	// for a fleet owner's answer).
	ObserveAnswerFrom(p *Peer, class AnswerClass, firstByte time.Duration, at time.Time, origin uint32)
	// Settings snapshots the health settings in force (first-byte
	// timeouts, hedging and its budget, connect timeouts), for a
	// generation: its requests read them there.
	Settings() *Settings
	// SuspectLate hears that p's response head is past its first-byte
	// timeout and the request could not be hedged.
	SuspectLate(p *Peer, fbt time.Duration)
}
