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
// carries the signature and the key (selection.Hop.Leads), and the walker
// walks it as any hop; what differs for an owner is read from the hop.

import (
	"bytes"
	"net/http"
	"net/netip"
	"time"

	"github.com/peerd/peerd/internal/h1"
	"github.com/peerd/peerd/selection"
)

// The fleet reaches the engine in four parts, each where it belongs
// (*fleet.Fleet is all four): its routing is the generation's plan
// source (PlanSource), member verification its authenticator of member
// requests (Members), an owner's connects and answers go through the
// accounting of every hop (fleet.Accounting wraps the registry), and
// Fleet is what the cache layer tells it.

// Fleet is what the cache layer tells the fleet: an owner's answer, hit
// or miss, and the hot copies kept of them.
type Fleet interface {
	// OwnerAnswered counts an answer from a key's owner: it had the
	// object (hit) or fetched it.
	OwnerAnswered(hit bool)
	// HotCopies is the share of owners' answers kept here.
	HotCopies() float64
	HotCopyKept()
}

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

// memberField is the signature field of a member request.
const memberField = "Peerd-Fleet-Member"

// Hierarchy codes of an answer from the owner.
const (
	codeFleetHit  = "FLEET_HIT"
	codeFleetMiss = "FLEET_MISS"
)

// verifyMember checks a member request's signature: rq.member is the
// member that sent it; a request that carries the field but whose
// signature does not verify is refused.
func (tx *txn) verifyMember() *Error {
	rq := &tx.rq
	v := rq.req.Get(memberField)
	if v == nil {
		return nil
	}
	f := rq.gen.members
	if f == nil {
		return errorf(http.StatusForbidden, CodeAccessDenied, "", "a fleet member request, and this peerd is in no fleet")
	}
	node, ok := f.Verify(v, memberBinding(&rq.req, nil), rq.from.addr)
	if !ok {
		return errorf(http.StatusForbidden, CodeAccessDenied, "", "a fleet member request that does not verify (not signed by a member for this one and this request, replayed, from an address the member did not publish, or with a clock over 5s off)")
	}
	rq.member = node
	return nil
}

// share marks sr as a request the fleet may ask of its key's owner
// (Request.Shared: the fleet's routing leads its plan with the owner): a
// cacheable GET or HEAD missed here, not itself from a member, without
// credentials of its own.
func (tx *txn) share(to sink, sr *selection.Request) {
	rq := &tx.rq
	l := &tx.cl
	sr.Shared, sr.Binding = nil, nil
	if rq.gen.members == nil || rq.member != "" || to == sink(tx.w) || !l.keyed || rq.upgrade != nil {
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

// ownerAnswered notes an answer of a key's owner that is the request's
// answer — not a failure of its own (ownError; those, like a broken
// answer, go to the accounting: judge) — in the access log (FLEET_HIT
// when the owner had it) and the fleet's counts. An origin's 5xx it
// relayed is such an answer, relayed once: the plan's parents would ask
// the same origin again.
func (w *walker) ownerAnswered(a *attempt) {
	if a.err != nil || !a.final || a.own || w.h.fleet == nil {
		return
	}
	hit := ownerHit(&a.resp)
	a.hop.Code = codeFleetMiss
	if hit {
		a.hop.Code = codeFleetHit
	}
	w.h.fleet.OwnerAnswered(hit)
}

// memberWhole reads the whole body of an owner's answer before anything
// of it reaches the client, when its length is known and within what
// the cache keeps in memory (the size of a hot copy): an owner that dies
// mid-body then fails the attempt, which the walker retries at the plan's
// hops, instead of cutting an answer already begun. Larger bodies, and
// those of unknown length, stream as they come.
func (w *walker) memberWhole(a *attempt) {
	if a.err != nil || !a.final || !a.hop.Leads() {
		return
	}
	ch := w.rq.gen.cache
	if ch == nil || a.resp.BodyFor(a.headReq) != h1.LengthBody || a.resp.ContentLength > ch.MaxInMemory() {
		return
	}
	c := a.conn
	c.dl.readIn(time.Now(), w.rq.gen.cfg.ReadTimeout)
	hl := len(a.head)
	if err := c.r.Buffer(hl + int(a.resp.ContentLength)); err != nil {
		a.err, a.final, a.gotBytes, a.timedOut = err, false, true, false
		return
	}
	// The head moved with the buffer: its slices are taken again.
	a.head = c.r.Peek()[:hl]
	if err := h1.ParseResponse(a.head, &a.resp); err != nil {
		a.err, a.final = err, false
	}
}

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
