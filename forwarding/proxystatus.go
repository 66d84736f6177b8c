package forwarding

// This file holds Proxy-Status (RFC 9209): error types, and the members
// written for an error of a next hop's or of peerd's own (the blame is
// the walker's, walk.go).

import (
	"errors"
	"strconv"

	"github.com/peerd/peerd/internal/h1"
	"github.com/peerd/peerd/internal/nexthop"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
)

// Proxy-Status (RFC 9209), emitted and consumed. Every response peerd
// forwards carries its member, naming the next hop and its status; every
// error peerd makes carries the error type. A parent's own member on a
// 5xx says whose fault the error is: one the parent reports about its next
// hop is the origin's, never the parent's, and when it would be the same
// through any parent (destination_not_found, http_request_denied) it is
// not retried elsewhere.

// The RFC 9209 error types peerd uses.
const (
	psDestinationNotFound    = "destination_not_found"
	psDestinationUnavailable = "destination_unavailable"
	psConnectionRefused      = "connection_refused"
	psConnectionTimeout      = "connection_timeout"
	psConnectionTerminated   = "connection_terminated"
	psResponseTimeout        = "http_response_timeout"
	psResponseIncomplete     = "http_response_incomplete"
	psResponseHeaderSize     = "http_response_header_size"
	psRequestDenied          = "http_request_denied"
	psRequestError           = "http_request_error"
	psLoopDetected           = "proxy_loop_detected"
	psInternalError          = "proxy_internal_error"
)

// errorType is the RFC 9209 type of an error peerd answers itself.
func errorType(e *Error) string {
	switch e.Code {
	case CodeAccessDenied, CodeDenied, CodeNotCached, CodeAuthRequired, CodeAuthSlowed:
		return psRequestDenied
	case CodeBadRequest, CodeRequestTimeout:
		return psRequestError
	case CodeNoPeers:
		return psDestinationUnavailable
	case CodeTimeout:
		return psResponseTimeout
	case CodeLoopDetected:
		return psLoopDetected
	case CodeConnectFailed:
		switch peers.Classify(e.Err) {
		case peers.FailRefused:
			return psConnectionRefused
		case peers.FailTimeout:
			return psConnectionTimeout
		case peers.FailDNS:
			return psDestinationNotFound
		case peers.FailUnreachable:
			return psDestinationUnavailable
		}
		return psConnectionTerminated
	case CodeBadGateway:
		switch {
		case errors.Is(e.Err, h1.ErrHeadTooLarge):
			return psResponseHeaderSize
		case peers.Classify(e.Err) == peers.FailReset:
			var he h1.Error
			if errors.As(e.Err, &he) {
				return psResponseIncomplete
			}
			return psConnectionTerminated
		}
		return psResponseIncomplete
	}
	return psInternalError
}

// proxyStatusForError is the Proxy-Status field of an error answer.
func (tx *txn) proxyStatusForError(e *Error) string {
	b := []byte("Proxy-Status: ")
	b = append(b, tx.rq.gen.cfg.Name...)
	b = append(b, "; error="...)
	b = append(b, errorType(e)...)
	if e.Peer != "" {
		b = append(b, "; next-hop="...)
		b = appendSFItem(b, e.Peer)
	}
	if e.Err != nil {
		b = append(b, "; details="...)
		b = strconv.AppendQuote(b, printable(e.Err.Error()))
	}
	b = tx.rq.gen.appendNextHop(b)
	return string(append(b, "\r\n"...))
}

// appendNextHop appends to peerd's Proxy-Status member, when the default
// route has no usable next hop (every parent dead, cut off or drained,
// and DIRECT not allowed), the parameter that tells a child so
// (nexthop.NoNextHopParam): the child then sends it nothing until its
// probe's answer says it has one again. Its answers to a probe and its
// errors carry it.
func (g *generation) appendNextHop(b []byte) []byte {
	plan := g.routing.Plan(selection.DefaultRoute)
	if _, ok := plan.Next(); ok {
		return b
	}
	return append(append(b, "; "...), nexthop.NoNextHopParam...)
}

// appendProxyStatus appends peerd's member for a forwarded response.
func (tx *txn) appendProxyStatus(b []byte, status int) []byte {
	return appendProxyStatus(b, tx.rq.gen.cfg.Name, tx.hop, status)
}

// appendProxyStatus appends the member of the proxy named name for a
// response hop gave with status.
func appendProxyStatus(b []byte, name string, hop selection.Hop, status int) []byte {
	b = append(b, "Proxy-Status: "...)
	b = append(b, name...)
	b = append(b, "; next-hop="...)
	if hop.Peer == nil {
		b = append(b, "DIRECT"...)
	} else {
		b = appendSFItem(b, hop.Peer.Name())
	}
	b = append(b, "; fwd-status="...)
	b = strconv.AppendInt(b, int64(status), 10)
	return append(b, "\r\n"...)
}

// appendSFItem appends a name as an sf-token when it is one, else as an
// sf-string.
func appendSFItem(b []byte, s string) []byte {
	ok := len(s) > 0 && (s[0] >= 'A' && s[0] <= 'Z' || s[0] >= 'a' && s[0] <= 'z' || s[0] == '*')
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		ok = h1.IsTchar(c) || c == ':' || c == '/'
	}
	if ok {
		return append(b, s...)
	}
	return strconv.AppendQuote(b, printable(s))
}

// printable keeps an sf-string to visible ASCII.
func printable(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			out := []byte(s)
			for j := range out {
				if out[j] < 0x20 || out[j] > 0x7e {
					out[j] = '?'
				}
			}
			return string(out)
		}
	}
	return s
}
