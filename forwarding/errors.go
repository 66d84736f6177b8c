package forwarding

import (
	"errors"
	"fmt"
	"net/http"
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
}

func (e *Error) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("%d %s", e.Status, e.Code)
	}
	return fmt.Sprintf("%d %s: %v", e.Status, e.Code, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// The codes of contract section 7.
const (
	CodeAccessDenied  = "access-denied"
	CodeBadRequest    = "bad-request"
	CodeConnectFailed = "connect-failed"
	CodeBadGateway    = "bad-gateway"
	CodeNoPeers       = "no-peers"
	CodeTimeout       = "timeout"
	CodeLoopDetected  = "loop-detected"
)

var explanations = map[string]string{
	CodeAccessDenied:  "your address is not allowed to use this proxy",
	CodeBadRequest:    "the request is malformed",
	CodeConnectFailed: "every next hop failed to connect",
	CodeBadGateway:    "the next hop broke the response and the request could not be retried",
	CodeNoPeers:       "no live next hop is available",
	CodeTimeout:       "the next hop accepted the request but sent nothing in time",
	CodeLoopDetected:  "the request has already passed through this proxy (forwarding loop)",
}

func errorf(status int, code, peer string, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Peer: peer, Err: fmt.Errorf(format, args...)}
}

// writeError sends e as a plain-text error page.
func writeError(w http.ResponseWriter, e *Error) {
	h := w.Header()
	for k := range h {
		delete(h, k)
	}
	if e.Close {
		h.Set("Connection", "close")
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Peerd-Error", e.Code)
	if e.Peer != "" {
		h.Set("X-Peerd-Peer", e.Peer)
	}
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(e.Status)
	detail := ""
	if e.Err != nil {
		detail = "\n" + e.Err.Error()
	}
	fmt.Fprintf(w, "peerd: %d %s: %s%s\n", e.Status, e.Code, explanations[e.Code], detail)
}

// asError returns err as an *Error, or a 502 bad-gateway wrapping it.
func asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Status: http.StatusBadGateway, Code: CodeBadGateway, Err: err}
}
