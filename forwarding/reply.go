package forwarding

// This file holds the reply: what the client got for one request (the
// status of the one final head, the bytes, the hop whose answer it was,
// the error peerd answered). It is written through its methods only, so a
// second final head is refused in one place, as net/http's response
// writer does.

import "github.com/peerd/peerd/selection"

// reply is what the client got. The zero value is "nothing yet".
type reply struct {
	status  int
	code    string // X-Peerd-Error when peerd answered itself
	errType string // its RFC 9209 error type (Proxy-Status, the access log)
	// handedFrom is the client writer's count when the request began,
	// and tunnelIn what the far side sent through a tunnel: the bytes the
	// client got (see txn.sentBytes).
	handedFrom, tunnelIn int64
	// tunnelOut is what the client sent the far side through a tunnel.
	tunnelOut int64
	hop       selection.Hop
	hopped    bool // hop answered
	errHop    bool // hop is the one peerd's error answer is about
	headSent  bool // a final response head went to the client
}

// countFrom starts the count of what the client gets at the client
// writer's count now.
func (r *reply) countFrom(handed int64) { r.handedFrom = handed }

// tunnelBytes records what the far side of a tunnel sent the client (in)
// and what the client sent it (out).
func (r *reply) tunnelBytes(in, out int64) { r.tunnelIn, r.tunnelOut = in, out }

// answeredBy records the hop whose answer the client gets.
func (r *reply) answeredBy(h selection.Hop) { r.hop, r.hopped = h, true }

// about records the hop an error answer is about, unless a hop answered.
func (r *reply) about(h selection.Hop) {
	if !r.hopped {
		r.hop, r.errHop = h, true
	}
}

// sendHead records that the one final head goes out with status. It
// reports false, and changes nothing, when a head already went out: the
// caller must not write another.
func (r *reply) sendHead(status int) bool {
	if r.headSent {
		return false
	}
	r.headSent, r.status = true, status
	return true
}

// cutShort records that an answer already under way ended with an error
// (the access log says so; the client sees the connection cut).
func (r *reply) cutShort(status int) { r.status = status }
