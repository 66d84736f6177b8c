package forwarding

// This file holds the errors peerd answers itself with: codes, statuses
// and what they explain (the client writer writes them).

import (
	"fmt"

	"github.com/peerd/peerd/selection"
)

// Error is an answer peerd gives itself (contract section 7): a status, the
// X-Peerd-Error code, and the peer involved, if any.
type Error struct {
	Status int
	Code   string
	Peer   string
	Err    error
	// Close ends the client connection after the answer (the request's
	// framing cannot be trusted to find the next one).
	Close bool
	// Fields are extra header lines of the answer ("Name: value\r\n").
	Fields string
	// hop is the next hop the error is about (hopSet), so that the access
	// log names it as Proxy-Status does.
	hop    selection.Hop
	hopSet bool
}

func (e *Error) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("%d %s", e.Status, e.Code)
	}
	return fmt.Sprintf("%d %s: %v", e.Status, e.Code, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// The codes of contract sections 7 and 10, and peerd's own for a client
// too slow to send its request.
const (
	CodeAccessDenied   = "access-denied"
	CodeAuthRequired   = "auth-required"
	CodeAuthSlowed     = "auth-rate-limited"
	CodeBadRequest     = "bad-request"
	CodeConnectFailed  = "connect-failed"
	CodeBadGateway     = "bad-gateway"
	CodeNoPeers        = "no-peers"
	CodeTimeout        = "timeout"
	CodeLoopDetected   = "loop-detected"
	CodeRequestTimeout = "request-timeout"
	CodeDenied         = "destination-denied"
)

var explanations = map[string]string{
	CodeAccessDenied:   "your address is not allowed to use this proxy",
	CodeAuthRequired:   "this proxy needs a user name and password (Proxy-Authorization: Basic)",
	CodeAuthSlowed:     "too many wrong passwords; wait a little and try again",
	CodeBadRequest:     "the request is malformed",
	CodeConnectFailed:  "every next hop failed to connect",
	CodeBadGateway:     "the next hop broke the response and the request could not be retried",
	CodeNoPeers:        "no live next hop is available",
	CodeTimeout:        "the next hop accepted the request but sent nothing in time",
	CodeLoopDetected:   "the request has already passed through this proxy (forwarding loop)",
	CodeRequestTimeout: "the request did not arrive in time",
	CodeDenied:         "this proxy does not connect to that destination",
}

func errorf(status int, code, peer string, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Peer: peer, Err: fmt.Errorf(format, args...)}
}
