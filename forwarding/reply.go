package forwarding

// This file holds the reply: what the client got for one request besides
// its head and bytes, which the client writer keeps (the hop whose answer
// it was, the error peerd answered, a tunnel's bytes), for the access log
// and the metrics.

import "github.com/peerd/peerd/selection"

// reply is what the client got. The zero value is "nothing yet".
type reply struct {
	code    string // X-Peerd-Error when peerd answered itself
	errType string // its RFC 9209 error type (Proxy-Status, the access log)
	// tunnelIn is what the far side sent through a tunnel, tunnelOut
	// what the client sent it.
	tunnelIn, tunnelOut int64
	hop                 selection.Hop
	hopped              bool // hop answered
	errHop              bool // hop is the one peerd's error answer is about
	tunnelled           bool
}

// answeredBy records the hop whose answer the client gets.
func (r *reply) answeredBy(h selection.Hop) { r.hop, r.hopped = h, true }

// about records the hop an error answer is about, unless a hop answered.
func (r *reply) about(h selection.Hop) {
	if !r.hopped {
		r.hop, r.errHop = h, true
	}
}
