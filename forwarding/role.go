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
	// retry_on_status), and the error type its Proxy-Status member
	// reports ("": none), which never counts against it.
	Failed(resp *h1.Response, retryStatus bool) (own, retry bool, reported string)
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

// Failed: a parent's final 5xx is its own failure when its Proxy-Status
// member (the last: RFC 9209 lists them origin first) says so
// (proxy_internal_error, proxy_configuration_error,
// proxy_internal_response), or Squid's X-Squid-Error says
// ERR_SHUTTING_DOWN. An error it reports about its own next hop is never
// its own: when it would be the same through any parent
// (destination_not_found, http_request_denied) it is not retried
// elsewhere; when it is the parent's path to the origin
// (connection_refused, connection_timeout) another parent may have one.
// A sibling's error to only-if-cached is a miss, and DIRECT is the
// origin itself: neither says anything here.
func (r peerRole) Failed(resp *h1.Response, retryStatus bool) (own, retry bool, reported string) {
	if r.p == nil || resp.Status < http.StatusInternalServerError || r.p.Type() == peers.Sibling {
		return false, retryStatus, ""
	}
	t := upstreamError(resp.Fields)
	switch t {
	case "proxy_internal_error", "proxy_configuration_error", "proxy_internal_response":
		own = true
	default:
		v := resp.Get("X-Squid-Error")
		own = len(v) >= 16 && string(v[:16]) == "ERR_SHUTTING_DOWN"
	}
	switch t {
	case psDestinationNotFound, psRequestDenied:
		return own, false, t // the same through any parent
	case psConnectionRefused, psConnectionTimeout:
		return own, true, t // the parent's path to the origin: another may have one
	}
	return own, retryStatus, t
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
