package forwarding

// This file holds the engine's part of the fleet as one cache (contract
// section 20). A cacheable miss on a member that does not own the key is
// asked of the owner first, as of a sibling but without only-if-cached:
// the owner looks it up and fetches it with its own collapsed forwarding,
// so the fleet reaches a parent once per object. The request carries the
// member's signature; the owner answers such a request itself (it is
// never routed to another owner) and refuses a signature that does not
// verify. An owner that fails (connect, answer, its own 5xx) is not asked
// again for a while, and the request goes on to the plan's hops at once.
// The owner's answer is relayed and kept here only as a hot copy.
//
// The fleet is a plan source, not a branch of the walk: share marks a
// request the fleet may ask of its owner, the fleet's routing (the
// generation's, fleet.Routing) leads its plan with the owner's hop, which
// carries its role (fleet.OwnerRole: the signature, the key, which
// failures are its own, how its answer is read and kept: role.go), and
// the walker walks it as any hop. A request another member sent is
// vouched for here (vouch), and answered as its key's owner.

import (
	"net/http"
	"net/netip"

	"github.com/peerd/peerd/internal/h1"
	"github.com/peerd/peerd/selection"
)

// The fleet reaches the engine in three parts, each where it belongs
// (*fleet.Fleet is all three): its routing is the generation's plan
// source (PlanSource), whose owner hops carry their role
// (fleet.OwnerRole: role.go); member verification is its authenticator
// of member requests (Members); and an owner's connects and answers go
// through the accounting of every hop (fleet.Accounting wraps the
// registry).

// PlanSource wraps a generation's routing: the fleet's leads the plan of
// a shared request (Request.Shared) with its key's owner, signed over
// Request.Binding (memberBinding).
type PlanSource interface {
	Routing(rt selection.Routing) selection.Router
}

// Members authenticates the fleet's member requests.
type Members interface {
	// Verify checks a member request's signature field, from the address
	// from, and names the member that sent it.
	Verify(value, binding []byte, from netip.Addr) (string, bool)
	// Served counts a member request answered here as the owner;
	// FetchBegin and FetchEnd bracket its fetch from a next hop.
	Served()
	FetchBegin()
	FetchEnd()
}

// memberField is the signature field of a member request (the one
// fleet.OwnerRole writes: fleet.MemberField).
const memberField = "Peerd-Fleet-Member"

// vouch checks a member request's signature: one that verifies is
// vouched for by the member that sent it, and counted as answered here
// as the owner; a request that carries the field but whose signature
// does not verify is refused.
func (tx *txn) vouch() *Error {
	rq := &tx.rq
	v := rq.req.Get(memberField)
	if v == nil {
		return nil
	}
	f := rq.gen.members
	if f == nil {
		return errorf(http.StatusForbidden, CodeAccessDenied, "", "a fleet member request, and this peerd is in no fleet")
	}
	_, ok := f.Verify(v, memberBinding(&rq.req, nil), rq.from.addr)
	if !ok {
		return errorf(http.StatusForbidden, CodeAccessDenied, "", "a fleet member request that does not verify (not signed by a member for this one and this request, replayed, from an address the member did not publish, or with a clock over 5s off)")
	}
	rq.vouched = true
	f.Served()
	return nil
}

// fetchFor brackets the fetch from a next hop of a request vouched for by
// another member, which this member makes as the key's owner: its load.
// It returns the bracket's end.
func (tx *txn) fetchFor() func() {
	if !tx.rq.vouched {
		return func() {}
	}
	m := tx.rq.gen.members
	m.FetchBegin()
	return m.FetchEnd
}

// share marks sr as a request the fleet may ask of its key's owner
// (Request.Shared: the fleet's routing leads its plan with the owner): a
// cacheable GET or HEAD missed here, not itself from a member, without
// credentials of its own.
func (tx *txn) share(to sink, sr *selection.Request) {
	rq := &tx.rq
	l := &tx.cl
	sr.Shared, sr.Binding = nil, nil
	if rq.gen.members == nil || rq.vouched || to == sink(tx.w) || !l.keyed || rq.upgrade != nil {
		return
	}
	if l.fwd != fwdURIMiss && l.fwd != fwdStale && l.fwd != fwdVary {
		return
	}
	if rq.method != http.MethodGet && rq.method != http.MethodHead || rq.req.Get("Authorization") != nil {
		return
	}
	sr.Shared, sr.Binding = l.cq.Key, memberBinding(&rq.req, nil)
}

// memberBinding appends to b what a member request's signature binds
// besides its sender, recipient, time and nonce: what changes the answer
// (method, target, Host, Cache-Control, Range), read alike by the member
// from its client's request and by the owner from the request it got.
func memberBinding(req *h1.Request, b []byte) []byte {
	b = append(append(b, req.Method...), 0)
	b = append(append(b, req.Target...), 0)
	b = append(append(append(append(b, req.Host...), ':'), req.Port...), 0)
	b = append(append(b, req.Get("Cache-Control")...), 0)
	return append(b, req.Get("Range")...)
}
