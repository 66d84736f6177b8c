package peers

// This file holds Accounting: what the engine tells the health of next
// hops about the requests it sends them. *Registry is one; the fleet
// wraps it (fleet.Accounting) to keep its members' part.

import "time"

// Accounting tracks in-flight requests per peer and hears what came of
// them; *Registry is one.
type Accounting interface {
	BeginRequest(p *Peer, now time.Time) bool
	EndRequest(p *Peer)
	// Observe hears an outcome: a connect pending past its hedge delay
	// (ConnectSlow), an answer to a request written whole (Answered, for
	// an origin: OriginHash of its host; of the key, for a fleet owner's
	// answer), a late head that could not be hedged (HeadLate), what the
	// peer said of its own next hop (NextHopFailed).
	Observe(p *Peer, o Outcome)
	// Settings snapshots the health settings in force (first-byte
	// timeouts, hedging and its budget, connect timeouts), for a
	// generation: its requests read them there.
	Settings() *Settings
}
