package fleet

// This file holds the fleet as a plan source: Routing wraps a request's
// routes and leads the plan of a request the fleet shares with the key's
// owner, signed for it, when another member owns the key. The engine
// walks that hop like any other; what an owner does differently is its
// role (role.go).

import (
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
)

// Owners is what the routing asks of the fleet: the owner of a key, a
// signature for a request to it, and the count of requests fetched here
// because their owner is suspected; and the counts its owners' answers
// keep. *Fleet is one.
type Owners interface {
	Owner(key []byte) (node string, hop *peers.Peer, self, ok bool)
	Sign(to string, binding []byte) []byte
	OwnerSkipped()
	ownerCounts
}

// Routing is rt with its plans led by the key's owner.
type Routing struct {
	selection.Routing
	o Owners
}

// NewRouting returns rt's plans led by o's owners.
func NewRouting(rt selection.Routing, o Owners) Routing { return Routing{rt, o} }

// Routing is rt led by this fleet's owners.
func (f *Fleet) Routing(rt selection.Routing) selection.Router { return NewRouting(rt, f) }

// Plan is rt's plan for r, led by the owner of r.Shared when another
// member owns it and is not suspected (one that is: the request is
// fetched here, counted as failed).
func (r Routing) Plan(sr selection.Request) selection.Plan {
	p := r.Routing.Plan(sr)
	if len(sr.Shared) == 0 {
		return p
	}
	node, hop, self, ok := r.o.Owner(sr.Shared)
	if !ok || self {
		return p
	}
	if hop == nil {
		r.o.OwnerSkipped() // suspected for ownership: fetched here
		return p
	}
	p.Lead(selection.Hop{Peer: hop, Code: CodeOwnerMiss, Role: OwnerRole{sig: r.o.Sign(node, sr.Binding), key: sr.Shared, c: r.o}})
	return p
}
