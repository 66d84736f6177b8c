package forwarding

// This file holds Proxy-Status (RFC 9209): error types, and the members
// written for an error of a next hop's or of peerd's own (the blame is
// the walker's, walk.go).

import (
	"errors"
	"strconv"

	"github.com/peerd/peerd/internal/h1"
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
	return string(append(b, "\r\n"...))
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

// upstreamError returns the error type a parent's Proxy-Status reports:
// the error parameter of the last member (the parent's own, closest to
// peerd), or "".
func upstreamError(fields []h1.Field) string {
	var last string
	for _, f := range fields {
		if f.Is("Proxy-Status") {
			if t, ok := lastMemberError(f.Value); ok {
				last = t
			} else {
				last = ""
			}
		}
	}
	return last
}

// lastMemberError parses a Proxy-Status list (RFC 8941 List of Items with
// parameters) and returns the error parameter of its last member; ok is
// false when the last member has none. Malformed input yields "", false.
func lastMemberError(v []byte) (string, bool) {
	errType, has := "", false
	i := 0
	for i < len(v) {
		for i < len(v) && (v[i] == ' ' || v[i] == '\t') {
			i++
		}
		// The member's item: a token or a string.
		var ok bool
		if i, ok = skipBareItem(v, i); !ok {
			return "", false
		}
		errType, has = "", false
		// Its parameters.
		for {
			for i < len(v) && v[i] == ' ' {
				i++
			}
			if i >= len(v) || v[i] != ';' {
				break
			}
			i++
			for i < len(v) && v[i] == ' ' {
				i++
			}
			ks := i
			for i < len(v) && (v[i] >= 'a' && v[i] <= 'z' || v[i] >= '0' && v[i] <= '9' || v[i] == '_' || v[i] == '-' || v[i] == '.' || v[i] == '*') {
				i++
			}
			key := v[ks:i]
			if len(key) == 0 {
				return "", false
			}
			if i < len(v) && v[i] == '=' {
				i++
				vs := i
				if i, ok = skipBareItem(v, i); !ok {
					return "", false
				}
				if string(key) == "error" {
					errType, has = string(v[vs:i]), true
				}
			}
		}
		for i < len(v) && (v[i] == ' ' || v[i] == '\t') {
			i++
		}
		if i < len(v) {
			if v[i] != ',' {
				return "", false
			}
			i++
		}
	}
	return errType, has
}

// skipBareItem moves past an sf-token, sf-string, integer or boolean.
func skipBareItem(v []byte, i int) (int, bool) {
	if i >= len(v) {
		return i, false
	}
	switch c := v[i]; {
	case c == '"':
		for i++; i < len(v); i++ {
			switch v[i] {
			case '\\':
				i++
			case '"':
				return i + 1, true
			}
		}
		return i, false
	case c == '?':
		if i+1 < len(v) && (v[i+1] == '0' || v[i+1] == '1') {
			return i + 2, true
		}
		return i, false
	case c == '-' || c >= '0' && c <= '9':
		j := i + 1
		for j < len(v) && (v[j] >= '0' && v[j] <= '9' || v[j] == '.') {
			j++
		}
		return j, true
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '*':
		j := i + 1
		for j < len(v) && (h1.IsTchar(v[j]) || v[j] == ':' || v[j] == '/') {
			j++
		}
		return j, true
	}
	return i, false
}
