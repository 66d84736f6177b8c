package fleet

// This file holds the fleet's part of the next hops' accounting. The
// engine reports what came of a request asked of a key's owner through
// the same calls as for any next hop — its connect through the dialer's
// reporter, its answer through ObserveAnswerFrom — and Accounting,
// wrapped around the registry, keeps the members' part here: an owner's
// own failures make it suspect for ownership, for every key or, for an
// error answer of its own, for that key alone (the answer's subject is
// then the key's hash); everything else is the registry's.

import (
	"encoding/binary"

	"github.com/peerd/peerd/peers"
)

// Registry is the accounting of next hops that Accounting wraps: the
// engine's, and the dialer's report of connects; *peers.Registry is one.
type Registry interface {
	peers.Accounting
}

// Accounting is r with the fleet's members accounted here.
type Accounting struct {
	Registry
	f *Fleet
}

// Accounting wraps r: what the engine reports of a member goes to this
// fleet, the rest to r.
func (f *Fleet) Accounting(r Registry) Accounting { return Accounting{r, f} }

// Observe hears an outcome. A member's is judged here: a connect to an
// owner that failed (for a client, not a probe) makes it suspect for
// all its keys; an owner's own error answer (AnswerOwn5xx) for the key
// the answer's origin hashes (Origin); a broken or timed-out answer for
// every key. A complete answer is no failure (an origin's 5xx the owner
// relayed is one). The registry never judges a member.
func (a Accounting) Observe(p *peers.Peer, o peers.Outcome) {
	if p.Type() != peers.Sibling { // (a member's hop is one: peers.NewMember)
		a.Registry.Observe(p, o)
		return
	}
	if _, member := a.f.shared.memberHops.Load(p); !member {
		a.Registry.Observe(p, o)
		return
	}
	switch {
	case o.Event == peers.Connected && o.Err != nil && !o.Probe:
		a.f.ownerFailed(p.Name(), 0, false)
	case o.Event != peers.Answered || o.Class == peers.AnswerOK:
	case o.Class == peers.AnswerOwn5xx:
		a.f.ownerFailed(p.Name(), o.Origin, true)
	default:
		a.f.ownerFailed(p.Name(), 0, false)
	}
}

// KeyHash is the subject of an answer about key, as the engine reports
// an owner's (peers.OriginHash of the key).
func KeyHash(key []byte) uint32 { return peers.OriginHash(key) }

// keySuspect is the keySuspects entry of node's key hashed to about.
func keySuspect(node string, about uint32) string {
	return node + "\x00" + string(binary.BigEndian.AppendUint32(nil, about))
}
