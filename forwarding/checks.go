package forwarding

// This file holds the checks a request meets before it is forwarded:
// [proxy] allow, the host made canonical, the destination policy
// ([[rule]]s and Basic credentials in rules.go, then [access]) and
// Max-Forwards.

import (
	"net/http"
	"strconv"

	"github.com/peerd/peerd/access"
	"github.com/peerd/peerd/internal/h1"
)

// canonicalHost gives the request its host's one spelling (see
// access.CanonicalHost) before anything checks it: the target and Host
// that every check, the cache key and every next hop see are rewritten
// when the client wrote the host another way. A host that cannot be read
// is refused with 400.
func (tx *txn) canonicalHost() *Error {
	req := &tx.rq.req
	if req.HostBracketed || (req.Form != h1.AbsoluteForm && req.Form != h1.AuthorityForm) {
		return nil
	}
	b := tx.target[:0]
	if req.Form == h1.AbsoluteForm {
		b = append(append(b, req.Scheme...), "://"...)
	}
	hostAt := len(b)
	b, changed, err := access.CanonicalHost(b, req.Host)
	tx.target = b // keeps the buffer (an IPv4 literal is written out each time)
	if err != nil {
		return errorf(http.StatusBadRequest, CodeBadRequest, "", "host %q: %v", req.Host, err)
	}
	if !changed {
		return nil
	}
	hostEnd := len(b)
	if len(req.Port) > 0 {
		b = append(append(b, ':'), req.Port...)
	}
	portAt := len(b) - len(req.Port)
	b = append(b, req.PathQuery...)
	tx.target = b
	req.Target, req.Host = b, b[hostAt:hostEnd]
	if len(req.Port) > 0 {
		req.Port = b[portAt : portAt+len(req.Port)]
	}
	if req.Form == h1.AbsoluteForm {
		req.Scheme = b[:hostAt-3]
		req.PathQuery = b[len(b)-len(req.PathQuery):]
	}
	return nil
}

// checkDestination puts the destination's port and name to the policy
// before anything is dialled or sent; the address dialled is checked again
// when DIRECT resolves it.
func (rq *request) checkDestination(connect bool) *Error {
	if !rq.vouched { // a member's request passed its own member's rules
		if _, e := rq.checkRules(); e != nil {
			return e // [[rule]] comes before the destination policy
		}
	}
	pol := rq.gen.policy
	err := pol.CheckPort(connect, rq.port)
	if err == nil {
		err = access.Unspecified(rq.req.Host)
	}
	if err == nil && pol.HostChecks() {
		err = pol.CheckHost(string(rq.req.Host))
	}
	if err != nil {
		return errorf(http.StatusForbidden, CodeDenied, "", "%v", err)
	}
	return nil
}

// maxForwards honours Max-Forwards on TRACE and OPTIONS (RFC 9110 7.6.2):
// at zero peerd answers itself; otherwise the value is decremented.
func (tx *txn) maxForwards() bool {
	rq := &tx.rq
	if rq.method != http.MethodTrace && rq.method != http.MethodOptions {
		return false
	}
	v := rq.req.Get("Max-Forwards")
	if v == nil {
		return false
	}
	n, err := strconv.Atoi(string(v))
	if err != nil || n < 0 {
		tx.fail(errorf(http.StatusBadRequest, CodeBadRequest, "", "bad Max-Forwards %q", v))
		return true
	}
	if n > 0 {
		rq.maxFwd = n - 1
		return false
	}
	b := tx.out[:0]
	if rq.method == http.MethodOptions {
		// (A child's health probe: its Proxy-Status member says whether
		// this peerd has a usable next hop.)
		b = append(b, "HTTP/1.1 200 OK\r\nAllow: GET, HEAD, POST, PUT, DELETE, OPTIONS, TRACE, CONNECT, PATCH\r\nProxy-Status: "...)
		b = append(rq.gen.appendNextHop(append(b, rq.gen.cfg.Name...)), "\r\nContent-Length: 0\r\n\r\n"...)
	} else {
		// TRACE: echo the request as received, less credentials and
		// cookies.
		var echo []byte
		for i, line := range splitLines(rq.head) {
			if i > 0 && hiddenFromTrace(line) {
				continue
			}
			echo = append(append(echo, line...), '\r', '\n')
		}
		b = append(b, "HTTP/1.1 200 OK\r\nContent-Type: message/http\r\nContent-Length: "...)
		b = strconv.AppendInt(b, int64(len(echo)), 10)
		b = append(append(b, "\r\n\r\n"...), echo...)
	}
	tx.out = b
	if tx.w.writeHead(http.StatusOK, b) == nil {
		tx.w.flush()
	}
	return true
}

// traceHidden names the fields a TRACE echo leaves out: RFC 9110 9.3.8 asks
// the recipient that answers a TRACE to exclude fields likely to hold
// sensitive data, and an echoed Cookie is what cross-site tracing steals.
var traceHidden = [...]string{"Proxy-Authorization:", "Authorization:", "Cookie:"}

// hiddenFromTrace reports whether a head line is one of traceHidden's fields.
func hiddenFromTrace(line []byte) bool {
	for _, name := range traceHidden {
		if len(line) >= len(name) && h1.EqualFold(line[:len(name)], name) {
			return true
		}
	}
	return false
}
