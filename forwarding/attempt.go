package forwarding

// This file holds an attempt at one next hop: how far it got (progress),
// the classes of how it ended, its trace span, the request's facts, and
// decide, the one function that says what follows. The attempt is a round trip
// (roundtrip.go): it gets a request, a hop and a connection, and ends
// with a response head and a body reader, or a classified error. It owns
// its connection from dial (or pool) to release; it knows nothing of the
// transaction it serves.

import (
	"time"

	"github.com/peerd/peerd/internal/h1"
	"github.com/peerd/peerd/selection"
	"github.com/peerd/peerd/tracing"
)

// progress is how far one attempt at one next hop got. It only moves
// forward, and it is set where each step happens, so retry decisions read
// facts, never error text (the gorouter lesson).
type progress uint8

const (
	planned      progress = iota // hop chosen; nothing done
	dialling                     // a connect is pending
	connected                    // a connection is had (fresh or pooled)
	headWritten                  // the whole request head was written
	bodyWritten                  // the request body was written too
	responseHead                 // a final response head was read
	sentToClient                 // a response byte (1xx or final) went to the client
)

var progressNames = [...]string{"planned", "dialling", "connected", "head_written", "body_written", "response_head", "sent_to_client"}

func (p progress) String() string { return progressNames[p] }

// attempt is one try at one hop: net/http's persistConn.roundTrip, in
// peerd's terms. It owns its connection (conn) from the dial or the pool
// to release, the response it reads there (resp, body), and the in-flight
// slot it holds at its peer (begun).
type attempt struct {
	h   *hops // its request's generation's
	hop selection.Hop
	// role is what the hop is asked as (role.go).
	role HopRole
	// span is this attempt's trace span, when its request is traced
	// (trace.go).
	span     *attemptSpan
	progress progress
	// reused: the connection sat idle in a pool before this attempt.
	reused bool
	// tunnel: a CONNECT; headReq: the request was HEAD (its answer has no
	// body to read past).
	tunnel, headReq bool
	// err ends the attempt early; nil once a final response head was read.
	err error
	// timedOut: err is read_timeout passing with no response byte.
	timedOut bool
	// late: the first-byte timeout passed with no response byte; the
	// attempt is still waiting (nothing failed yet). wasLate: it was, and
	// waits on (await).
	late, wasLate bool
	// refused: its late head was not hedged for want of hedge_budget; the
	// wait returns late again once its parent fails an answer elsewhere
	// (a parent that has stopped answering is hedged unbudgeted).
	refused bool
	// gotBytes: some response bytes arrived (a head that broke halfway).
	gotBytes bool
	// final: a final response head was read; status is its status and
	// head its bytes in the connection's buffer.
	final  bool
	status int
	head   []byte
	// clientBody: the client's own body broke while it was sent on.
	clientBody bool
	// own: a final 5xx the parent blames on itself (Proxy-Status
	// proxy_internal_error and kin, or Squid's ERR_SHUTTING_DOWN).
	own bool
	// unreached: a final answer saying the request never reached its
	// destination through the hop (its own next hop failed).
	unreached bool
	// writtenAt is when the request went out (to a peer); headAt when
	// its final head was read; firstByte how long that took.
	writtenAt time.Time
	headAt    time.Time
	firstByte time.Duration

	conn  *upConn
	begun bool // the peer's in-flight slot is held
	// resp is the final (or interim) response head read on conn; body
	// reads its body from conn. Their buffers live from request to
	// request (see restart).
	resp h1.Response
	body h1.BodyReader
	// out is the request head being built (its buffer is reused).
	out []byte
}

// restart makes a the attempt n, keeping the buffers of its response,
// body reader and request head.
func (a *attempt) restart(n attempt) {
	n.resp, n.body, n.out = a.resp, a.body, a.out[:0]
	*a = n
}

// failure is the class of an attempt that did not end in a usable answer.
type failure uint8

const (
	notFailed     failure = iota
	connectFailed         // no connection: nothing sent; counted against the peer
	staleConn             // a pooled connection the peer had closed: nothing reached it
	beforeWrite           // a connection, but the head was not written whole
	afterWrite            // written; the response never came or broke
	timedOut              // written; no response byte within read_timeout
	statusRetry           // a final status listed in retry_on_status
	committed             // a response byte reached the client: nothing can be redone
	siblingMissed         // a sibling's error to only-if-cached: a miss, not a failure
	ownFailure            // a 5xx the parent blames on itself
	peerFull              // the peer is at max_conn: skipped, not failed, nothing sent
	lateHead              // written; no response byte by the first-byte timeout (still waiting)
	givenUp               // written; a late wait given up because the parent was found dead meanwhile
	unreached             // a final answer saying nothing reached the destination: the hop's next hop failed
)

var failureReasons = [...]string{"none", "connect_failed", "stale_connection", "before_write", "after_write", "timeout", "status", "committed", "sibling_miss", "own_5xx", "peer_full", "late", "given_up", "next_hop_failed"}

func (f failure) String() string { return failureReasons[f] }

// facts are what the retry decision needs to know about the request.
type facts struct {
	// idempotent: the method may be repeated (RFC 9110 9.2.2).
	idempotent bool
	// replayable: the body (if any) is buffered and can be sent again.
	replayable bool
	// retry504: 504 is in retry_on_status, so a per-try timeout is
	// retriable exactly like a 504 (the linkerd lesson).
	retry504 bool
	// tunnel: a CONNECT. Nothing of the client's is sent before the
	// parent answers 2xx, so a CONNECT that broke before its reply may go
	// to the next parent; the parent's refusal goes to the client.
	tunnel bool
	// hedgeable: the request may go to a second hop while the first is
	// late (retriable, its body buffered whole without trailers, no
	// upgrade, not a tunnel).
	hedgeable bool
}

// retriable reports whether the request may be sent again after it was
// written.
func (f facts) retriable() bool { return f.idempotent && f.replayable }

// verdict is what to do after an attempt.
type verdict uint8

const (
	answer      verdict = iota // give the client what we have: the response or the error
	nextHop                    // try the next hop of the plan; no retry budget spent
	retry                      // try the next hop of the plan, spending the retry budget
	sameFresh                  // try the same hop again on a fresh connection
	hedge                      // send the request to the next hop too; the first final head wins
	waitOn                     // go on waiting for this hop's answer
	waitSuspect                // wait on, the late hop suspect meanwhile (its hedge was refused)
	none                       // no hop answered, and none is left: the client gets the walk's error
)

var verdictNames = [...]string{"answer", "next_hop", "retry", "same_hop_fresh", "hedge", "wait", "wait_suspect", "none"}

func (v verdict) String() string { return verdictNames[v] }

// costsBudget reports whether retrying after class c spends the retry
// budget: connect failures and nothing-written retries cost the peers
// nothing and are exempt.
func costsBudget(c failure, f facts) bool {
	return !f.tunnel && (c == afterWrite || c == timedOut || c == statusRetry || c == ownFailure || c == lateHead || c == unreached)
}

// step is what decide reads of the walk when an attempt's step ends,
// besides the request's facts and the step's class.
type step struct {
	// lead: the attempt was at the plan's lead hop (the fleet's owner of
	// the key): moving on from it is the plan's first try, not a retry,
	// and spends no retry budget.
	lead bool
	// budget says whether the retry budget (for a late head:
	// hedge_budget) allows one more now; asked only when the step's
	// retry would spend it (the retry budget takes a lock).
	budget allowance
	// left tells, without taking it, whether the plan has a hop left
	// (healthy: one that is not suspect); *selection.Plan is one.
	left interface{ Left(healthy bool) bool }
}

// allowance says whether a budget allows one more now.
type allowance interface{ allows() bool }

// granted is an allowance known already: a hedge budget asked once, a
// withdrawal that found the retry budget spent.
type granted bool

func (g granted) allows() bool { return bool(g) }

// decide is the one place that says what follows an attempt, for every
// request, plain or CONNECT: a peer at max_conn, a connect that failed
// (alone or in a race), a sibling's miss, a head that is late, a broken
// answer, a status listed in retry_on_status, a parent's CONNECT reply.
// It changes nothing: what it reads of the plan (s.left) it reads from a
// copy.
func decide(c failure, f facts, s step) verdict {
	// move is the next hop, spending the budget when a retry after c
	// spends it (a lead hop's failure is no retry), or the answer when
	// the budget has none left or the plan no hop.
	move := func() verdict {
		switch spends := costsBudget(c, f) && !s.lead; {
		case spends && !s.budget.allows(), !s.left.Left(false):
			return answer
		case spends:
			return retry
		}
		return nextHop
	}
	switch c {
	case connectFailed, siblingMissed, peerFull:
		// Nothing reached the hop, or it said "not here": never an
		// answer (a sibling's miss with nothing after it gives the
		// client the error of no next hop, never the sibling's 504).
		if s.left.Left(false) {
			return nextHop
		}
		return none
	case beforeWrite:
		return move()
	case lateHead:
		// A late head is no failure yet: the request goes to a healthy
		// next hop too when it may be sent twice and the budget allows;
		// refused the budget, the late parent is suspect meanwhile (no
		// failure counted) when a healthy hop is there to take its new
		// requests; the wait goes on.
		switch {
		case f.hedgeable && s.budget.allows() && s.left.Left(true):
			return hedge
		case !s.budget.allows() && s.left.Left(true):
			return waitSuspect
		}
		return waitOn
	case staleConn:
		return sameFresh
	case givenUp:
		// The parent was declared dead while the request waited on it:
		// the request goes where a hedge would have sent it, whatever
		// the retry budget says (the dead parent gets nothing more).
		if f.retriable() && s.left.Left(false) {
			return nextHop
		}
	case afterWrite, timedOut:
		if f.tunnel {
			return move() // no reply to CONNECT: no client byte was sent
		}
		if f.retriable() && (c == afterWrite || f.retry504) {
			return move()
		}
	case statusRetry, ownFailure:
		// A hop's own failure is retried whatever retry_on_status says:
		// nothing of it reached the client, and another hop may be well.
		if f.retriable() {
			return move()
		}
	case unreached:
		// The hop said the request never reached its destination (its
		// own next hop failed): nothing reached the origin, so any
		// request whose body peerd still holds goes on (a CONNECT: no
		// client byte was sent), within the retry budget.
		if f.replayable || f.tunnel {
			return move()
		}
	}
	return answer // conservatively
}

// attemptSpan is a traced attempt's span while it runs.
type attemptSpan struct {
	trace *tracing.Request
	id    tracing.SpanID
	start time.Time
}
