package fleet

// This file holds the role of a key's owner as a next hop (OwnerRole):
// what the engine asks of a hop at its named points (forwarding.HopRole),
// answered for a member asked for a key it owns. Its request carries this
// member's signature; only its own failures — an error page of its own,
// marked X-Peerd-Error — are its fault and send the request on to the
// plan's hops (an origin's 5xx it relayed is the answer); its answer is
// read whole before it is relayed when it fits a hot copy, so that an
// owner that dies mid-body fails the attempt instead of cutting the
// client's answer; and it is kept here only as a hot copy.

import (
	"bytes"
	"math/rand/v2"

	"github.com/peerd/peerd/internal/h1"
	"github.com/peerd/peerd/internal/nexthop"
)

// MemberField is the field a member request's signature travels in.
const MemberField = "Peerd-Fleet-Member"

// Hierarchy codes of an answer from the owner.
const (
	CodeOwnerHit  = "FLEET_HIT"
	CodeOwnerMiss = "FLEET_MISS"
)

// ownerCounts are the fleet's counts of owners' answers and hot copies;
// *Fleet is one.
type ownerCounts interface {
	OwnerAnswered(hit bool)
	HotCopies() float64
	HotCopyKept()
}

// OwnerRole is a key's owner asked for it as a next hop.
type OwnerRole struct {
	sig, key []byte
	c        ownerCounts
}

// Fields appends the member request's signature.
func (r OwnerRole) Fields(b []byte) []byte {
	return append(append(append(b, MemberField+": "...), r.sig...), "\r\n"...)
}

// Sibling is false: asked as the owner, a member fetches what it lacks.
func (OwnerRole) Sibling() bool { return false }

// Failed: a final answer is the owner's own failure when it is an error
// or refusal of its own (a peerd error page: X-Peerd-Error), and only
// such a one is retried at the plan's hops; retry_on_status does not
// apply to what it relayed (the plan's parents would ask the same
// origin again). What an owner says of its own next hop is not read: its
// failure to fetch is its own, for that key.
func (OwnerRole) Failed(resp *h1.Response, _ bool) (own, retry bool, said nexthop.Said) {
	own = resp.Status >= 400 && resp.Get("X-Peerd-Error") != nil
	return own, own, nexthop.Said{}
}

// Answered counts an answer of the owner that is the request's answer,
// hit or miss by its Cache-Status, and names it FLEET_HIT or FLEET_MISS.
func (r OwnerRole) Answered(resp *h1.Response) string {
	hit := ownerHit(resp)
	r.c.OwnerAnswered(hit)
	if hit {
		return CodeOwnerHit
	}
	return CodeOwnerMiss
}

// Judged: the owner's answers are judged about its key.
func (r OwnerRole) Judged([]byte) (about []byte, ok bool) { return r.key, true }

// Whole reads an answer whole before relaying it when its length fits
// what the cache keeps in memory (the size of a hot copy).
func (OwnerRole) Whole(n, max int64) bool { return n <= max }

// Keep draws whether this answer is kept here, as a hot copy
// (hot_copies); the cache may still refuse it.
func (r OwnerRole) Keep() (keep, hot bool) { return rand.Float64() < r.c.HotCopies(), true }

// Kept counts a hot copy kept.
func (r OwnerRole) Kept() { r.c.HotCopyKept() }

// ownerHit reports whether the owner's Cache-Status entry (the last one:
// RFC 9211 lists the caches from the origin's side) says hit.
func ownerHit(resp *h1.Response) bool {
	cs := resp.Get("Cache-Status")
	if i := bytes.LastIndexByte(cs, ','); i >= 0 {
		cs = cs[i+1:]
	}
	for _, p := range bytes.Split(cs, []byte{';'}) {
		if bytes.Equal(bytes.TrimSpace(p), []byte("hit")) {
			return true
		}
	}
	return false
}
