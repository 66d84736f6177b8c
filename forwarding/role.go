package forwarding

// This file holds a hop's role: what a next hop does that depends on what
// it is asked as. A peer is asked as itself (peerRole, here); a plan
// source may give a hop another role (selection.Hop.Role: the fleet's
// owner of a key, fleet.OwnerRole). The engine calls the role at named
// points — the fields its request carries, how a final answer is classed,
// what the answer says of the hop, what its answers are judged about, how
// much of an answer is read before it is relayed, and how the cache keeps
// it — and never asks which role a hop has.

import (
	"net/http"

	"github.com/peerd/peerd/internal/h1"
	"github.com/peerd/peerd/internal/nexthop"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
)

// HopRole is what the engine asks of a hop's role.
type HopRole interface {
	// Fields appends what the hop's request carries beyond the client's
	// request (a key owner's signature).
	Fields(b []byte) []byte
	// Sibling reports whether the hop is asked as a sibling: with
	// only-if-cached, its refusal a miss.
	Sibling() bool
	// Failed says of a final answer whether it is a failure of the hop's
	// own (counted against it; the request goes on), whether another
	// hop may do better (retry; retryStatus: its status is listed in
	// retry_on_status), and what it says about the hop's own next hop
	// (said: that the request never reached the origin, that the hop has
	// no next hop at all), which never counts against it.
	Failed(resp *h1.Response, retryStatus bool) (own, retry bool, said nexthop.Said)
	// Answered reads a final answer that is the request's answer and
	// names its hierarchy code ("": the hop's own).
	Answered(resp *h1.Response) string
	// Judged is what the hop's answers are judged about (for a parent,
	// the origin's host); ok false: they are not judged.
	Judged(host []byte) (about []byte, ok bool)
	// Whole reports whether an answer of known length n is read whole
	// before any of it is relayed, where answers up to max are kept in
	// memory.
	Whole(n, max int64) bool
	// Keep says whether the cache keeps the hop's answers, and whether
	// as hot copies of another's (bounded apart); Kept is told when one
	// was kept as such.
	Keep() (keep, hot bool)
	Kept()
}

// roleOf is the role hop is asked as: the one its plan source gave it,
// else a peer's (or DIRECT's) own.
func roleOf(hop selection.Hop) HopRole {
	if r, ok := hop.Role.(HopRole); ok {
		return r
	}
	return peerRole{hop.Peer}
}

// peerRole is a peer asked as itself (p nil: DIRECT, the origin).
type peerRole struct{ p *peers.Peer }

func (peerRole) Fields(b []byte) []byte { return b }

func (r peerRole) Sibling() bool { return r.p != nil && r.p.Type() == peers.Sibling }

// Failed: a parent's final error says what it says of its own next hop
// (internal/nexthop: its Proxy-Status member, the last, RFC 9209 listing
// them origin first; Squid's X-Squid-Error; peerd's own). One that says
// the request never reached the origin (a connect refused or timed out,
// a name not resolved, no next hop of its own: the docs list them) is
// never the parent's failure, and another parent may reach it (said
// Unreached: the walker sends it on). A 5xx that is its own (Proxy-Status
// proxy_internal_error and kin, Squid's ERR_SHUTTING_DOWN) counts against
// it; a request it refused (http_request_denied) would be refused by any
// parent and is not retried elsewhere. A sibling's error to
// only-if-cached is a miss, and DIRECT is the origin itself: neither
// says anything here.
func (r peerRole) Failed(resp *h1.Response, retryStatus bool) (own, retry bool, said nexthop.Said) {
	if r.p == nil || resp.Status < http.StatusBadRequest || r.p.Type() == peers.Sibling {
		return false, retryStatus, nexthop.Said{}
	}
	said = nexthop.Read(answerOf(resp))
	if resp.Status < http.StatusInternalServerError {
		// A 4xx is the answer, unless it says the request never
		// reached the origin.
		return false, retryStatus, nexthop.Said{Unreached: said.Unreached, NoNextHop: said.NoNextHop, Why: said.Why}
	}
	if said.Type == psRequestDenied {
		retryStatus = false // the same through any parent
	}
	return said.Own, retryStatus, said
}

// answerOf is what internal/nexthop reads of resp.
func answerOf(resp *h1.Response) nexthop.Answer {
	var a nexthop.Answer
	for _, f := range resp.Fields {
		if f.Is("Proxy-Status") {
			a.ProxyStatus = append(a.ProxyStatus, f.Value)
		}
	}
	a.SquidError, a.PeerdError = resp.Get("X-Squid-Error"), resp.Get("X-Peerd-Error")
	return a
}

func (peerRole) Answered(*h1.Response) string { return "" }

// Judged: a parent's answers are judged about their origin; a sibling's
// and DIRECT's are not judged.
func (r peerRole) Judged(host []byte) ([]byte, bool) {
	return host, r.p != nil && r.p.Type() == peers.Parent
}

func (peerRole) Whole(n, max int64) bool { return false }

// Keep: a peer's answers are stored as any, unless it is proxy_only.
func (r peerRole) Keep() (keep, hot bool) { return r.p == nil || !r.p.ProxyOnly(), false }

func (peerRole) Kept() {}
