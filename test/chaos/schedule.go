package main

// This file holds the seeded schedule: which fault each exchange meets at
// the parents, which request each exchange is, and which run-level events
// (a parent killed, peerd stalled, reloaded, upgraded, a fleet member
// killed or stopped) happen when. Every choice is a pure function of the seed and an
// exchange's number, so a failing seed names the same faults again.

import (
	"encoding/binary"
	"hash/fnv"
	"math/rand/v2"
	"time"
)

// fault is what a parent does with one exchange.
type fault uint8

const (
	normal        fault = iota
	lateHead            // the head comes lateBy late (a parent's fault)
	trickle             // the body comes in pieces, slowly (the origin's pace)
	resetHead           // the connection is reset before any byte of a head
	resetBody           // reset in the middle of the body (the origin cut it)
	closeEarly          // closed without an answer
	own503              // the parent's own 503, Proxy-Status proxy_internal_error
	origin5xx           // an origin's 500, relayed by the parent
	shortBody           // a body shorter than its Content-Length (the origin cut it)
	badChunk            // a chunked body with a broken chunk (the origin cut it)
	extraBytes          // bytes past the end of the answer
	nextHopFailed       // the parent's connect to the origin failed: 503 ERR_CONNECT_FAIL, nothing reached it
	// The run-level faults' answers (never drawn per exchange):
	unreachableOrigin // the parent cannot reach the origin at all for a while (unreachOrigin)
	noNextHop         // the parent has no next hop of its own for a while: peerd's no-peers, no-next-hop
	faultKinds
)

var faultNames = [faultKinds]string{"normal", "late_head", "trickle", "reset_before_head", "reset_mid_body",
	"close_without_answer", "own_503", "origin_5xx", "short_body", "bad_chunk", "bytes_past_end", "next_hop_failed",
	"unreachable_origin", "no_next_hop"}

func (f fault) String() string { return faultNames[f] }

// parentsFault reports whether f is the parent's own failure: the only
// faults for which peerd may mark it suspect, dead or an outlier (I4).
// What a parent says of its own next hop (next_hop_failed,
// unreachable_origin, no_next_hop) never is.
func (f fault) parentsFault() bool {
	switch f {
	case lateHead, resetHead, closeEarly, own503, extraBytes:
		return true
	}
	return false
}

// cutsBody reports whether f cuts a body the head of which was sent: the
// only cuts a client may see (I2).
func (f fault) cutsBody() bool { return f == resetBody || f == shortBody || f == badChunk }

// lateBy is how late a late head is: past the first-byte timeout peerd
// learns from fast answers, well within read_timeout.
const lateBy = 900 * time.Millisecond

// mix hashes the seed and words into one uniform number.
func mix(seed uint64, words ...uint64) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	h.Write(b[:])
	for _, w := range words {
		binary.LittleEndian.PutUint64(b[:], w)
		h.Write(b[:])
	}
	x := h.Sum64()
	// fnv's low bits are weak for close inputs: finish with splitmix64.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// faultWeights: most exchanges are normal; the rest spread over the kinds.
var faultWeights = [faultKinds]int{normal: 70, lateHead: 4, trickle: 4, resetHead: 3, resetBody: 3, closeEarly: 3,
	own503: 3, origin5xx: 3, shortBody: 3, badChunk: 2, extraBytes: 2, nextHopFailed: 2}

// faultFor is the fault exchange id meets at its attempt-th arrival at a
// parent (a retry or a hedge is a later arrival).
func faultFor(seed uint64, id uint64, attempt int) fault {
	total := 0
	for _, w := range faultWeights {
		total += w
	}
	n := int(mix(seed, 1, id, uint64(attempt)) % uint64(total))
	for k, w := range faultWeights {
		if n < w {
			return fault(k)
		}
		n -= w
	}
	return normal
}

// kind is what one client exchange asks.
type kind uint8

const (
	getCached   kind = iota // GET of a cacheable object
	getFresh                // GET of an uncacheable answer made for this exchange
	head                    // HEAD of a cacheable object
	post                    // POST with a body (must reach an origin at most once)
	conditional             // GET with If-None-Match
	ranged                  // GET with Range
	tunnel                  // CONNECT to an echo
	kinds
)

var kindNames = [kinds]string{"get_cacheable", "get_uncacheable", "head", "post", "conditional_get", "range", "connect"}

func (k kind) String() string { return kindNames[k] }

var kindWeights = [kinds]int{getCached: 40, getFresh: 20, head: 8, post: 10, conditional: 8, ranged: 8, tunnel: 6}

// exchange is one client exchange as the schedule makes it.
type exchange struct {
	id       uint64
	kind     kind
	object   int  // the object asked (cacheable kinds)
	oneShot  bool // a connection of its own, closed after
	member   int  // which fleet member the client asks (0 or 1)
	rangeLo  int  // ranged: the first byte asked
	rangeLen int  // ranged: how many
	// idle: on a kept-alive connection, how long the client waits before
	// sending, long enough for peerd to park the connection; in a tunnel,
	// how long it leaves the tunnel idle halfway through its echo (0:
	// none).
	idle time.Duration
}

// objects is how many cacheable objects the clients ask for.
const objects = 64

func exchangeFor(seed, id uint64) exchange {
	r := rand.New(rand.NewPCG(seed, mix(seed, 2, id)))
	e := exchange{id: id, object: r.IntN(objects), oneShot: r.IntN(4) == 0, member: r.IntN(2)}
	total := 0
	for _, w := range kindWeights {
		total += w
	}
	n := r.IntN(total)
	for k, w := range kindWeights {
		if n < w {
			e.kind = kind(k)
			break
		}
		n -= w
	}
	size := objectSize(e.object)
	e.rangeLo = r.IntN(size)
	e.rangeLen = 1 + r.IntN(size-e.rangeLo)
	if !e.oneShot && r.IntN(64) == 0 {
		e.idle = parkedIdle + time.Duration(r.IntN(400))*time.Millisecond
	}
	return e
}

// parkedIdle is past the idle time after which peerd parks a keep-alive
// connection (200 ms): an exchange with an idle pause is sent on a
// parked connection.
const parkedIdle = 250 * time.Millisecond

// event is a run-level fault.
type event uint8

const (
	killParent    event = iota // a parent dies and comes back some seconds later
	stallPeerd                 // SIGSTOP, then SIGCONT
	reload                     // SIGHUP with a changed config
	upgrade                    // SIGUSR2 with a new binary at the path
	killMember                 // a fleet member is SIGKILLed, then started again
	stopMember                 // a fleet member is stopped (SIGTERM: it writes its disk index's image), then started again
	unreachOrigin              // a parent cannot reach the origin for a while (its connects there refused), then can
	loseNextHop                // a parent has no next hop of its own for a while (peerd's no-peers, no-next-hop), then has
	events
)

var eventNames = [events]string{"kill_parent", "stall_peerd", "reload", "upgrade", "kill_member", "stop_member",
	"unreachable_origin", "no_next_hop"}

func (e event) String() string { return eventNames[e] }

// planned is one event at a time after the start.
type planned struct {
	at     time.Duration
	event  event
	target int           // which parent (killParent)
	hold   time.Duration // how long the fault lasts (killParent, stallPeerd, killMember, stopMember)
}

// timeline is the run's events: every kind once in a seeded order, then
// seeded picks, one every gap, the first after warm and none in the last
// settle of the run.
func timeline(seed uint64, d time.Duration) []planned {
	const warm, gap, settle = 5 * time.Second, 6 * time.Second, 8 * time.Second
	r := rand.New(rand.NewPCG(seed, mix(seed, 3)))
	order := r.Perm(int(events))
	var out []planned
	for i, at := 0, warm; at < d-settle; i, at = i+1, at+gap {
		ev := event(r.IntN(int(events)))
		if i < len(order) {
			ev = event(order[i])
		}
		p := planned{at: at, event: ev, target: r.IntN(3)}
		switch ev {
		case killParent:
			p.hold = time.Duration(1500+r.IntN(2500)) * time.Millisecond
		case stallPeerd:
			p.hold = time.Duration(200+r.IntN(700)) * time.Millisecond
		case killMember, stopMember:
			p.hold = time.Duration(2000+r.IntN(2000)) * time.Millisecond
		case unreachOrigin, loseNextHop:
			p.hold = time.Duration(2000+r.IntN(3000)) * time.Millisecond
		}
		out = append(out, p)
	}
	return out
}
