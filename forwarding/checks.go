package forwarding

// This file holds the checks a request meets before it is forwarded:
// [proxy] allow, Basic credentials, the host made canonical, the
// destination policy ([[rule]]s in rules.go, then [access]) and
// Max-Forwards.

import (
	"net/http"
	"net/netip"
	"strconv"

	"github.com/peerd/peerd/access"
	"github.com/peerd/peerd/auth"
	"github.com/peerd/peerd/internal/h1"
)

// authenticate checks the request's Basic credentials ([auth]): the user
// for the access log, or the answer — 407 with a challenge for a missing
// or wrong credential, 429 for a source that keeps failing (a right
// credential is never refused).
func (tx *txn) authenticate(a Authenticator) *Error {
	user, v := a.Check(tx.req.Get("Proxy-Authorization"), tx.cc.remoteStr, tx.start)
	if v == auth.Allowed {
		tx.user = user
		return nil
	}
	tx.claimed = user // for the access log only: it was not proven
	if v == auth.Slowed {
		e := errorf(http.StatusTooManyRequests, CodeAuthSlowed, "", "too many wrong credentials from %s", tx.cc.remoteStr)
		e.Fields = "Retry-After: 1\r\n"
		return e
	}
	e := errorf(http.StatusProxyAuthRequired, CodeAuthRequired, "", "proxy authentication required")
	e.Fields = "Proxy-Authenticate: Basic realm=\"" + a.Realm() + "\"\r\n"
	return e
}

// canonicalHost gives the request its host's one spelling (see
// access.CanonicalHost) before anything checks it: the target and Host
// that every check, the cache key and every next hop see are rewritten
// when the client wrote the host another way. A host that cannot be read
// is refused with 400.
func (tx *txn) canonicalHost() *Error {
	req := &tx.req
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

// https reports whether the request's URL is https.
func (tx *txn) https() bool {
	return tx.req.Form == h1.AbsoluteForm && h1.EqualFold(tx.req.Scheme, "https")
}

// checkDestination puts the destination's port and name to the policy
// before anything is dialled or sent; the address dialled is checked again
// when DIRECT resolves it.
func (tx *txn) checkDestination(connect bool) *Error {
	if _, e := tx.checkRules(); e != nil {
		return e // [[rule]] comes before the destination policy
	}
	pol := tx.cc.p.policy.Load()
	err := pol.CheckPort(connect, tx.port)
	if err == nil {
		err = access.Unspecified(tx.req.Host)
	}
	if err == nil && pol.HostChecks() {
		err = pol.CheckHost(string(tx.req.Host))
	}
	if err != nil {
		return errorf(http.StatusForbidden, CodeDenied, "", "%v", err)
	}
	return nil
}

// after says what becomes of the connection once peerd answered: it stays
// open only when the request's body (if any) was consumed, so the next
// request's framing is known.
func (tx *txn) after() outcome {
	if tx.keepAlive && tx.bodyDone && !tx.clientGone {
		return keepOpen
	}
	return closeConn
}

// maxForwards honours Max-Forwards on TRACE and OPTIONS (RFC 9110 7.6.2):
// at zero peerd answers itself; otherwise the value is decremented.
func (tx *txn) maxForwards() bool {
	if tx.method != http.MethodTrace && tx.method != http.MethodOptions {
		return false
	}
	v := tx.req.Get("Max-Forwards")
	if v == nil {
		return false
	}
	n, err := strconv.Atoi(string(v))
	if err != nil || n < 0 {
		tx.fail(errorf(http.StatusBadRequest, CodeBadRequest, "", "bad Max-Forwards %q", v))
		return true
	}
	if n > 0 {
		tx.maxFwd = n - 1
		return false
	}
	w := tx.cc.w
	tx.sendHead(http.StatusOK)
	if tx.method == http.MethodOptions {
		w.WriteString("HTTP/1.1 200 OK\r\nAllow: GET, HEAD, POST, PUT, DELETE, OPTIONS, TRACE, CONNECT, PATCH\r\nContent-Length: 0\r\n\r\n")
		w.Flush()
		return true
	}
	// TRACE: echo the request as received, less credentials and cookies.
	echo := tx.out[:0]
	for i, line := range splitLines(tx.head) {
		if i > 0 && hiddenFromTrace(line) {
			continue
		}
		echo = append(append(echo, line...), '\r', '\n')
	}
	tx.out = echo
	w.WriteString("HTTP/1.1 200 OK\r\nContent-Type: message/http\r\nContent-Length: ")
	w.WriteString(strconv.Itoa(len(echo)))
	w.WriteString("\r\n\r\n")
	w.Write(echo)
	w.Flush()
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

// allowed reports whether the [proxy] allow ACL admits a.
func (c *runtimeConfig) allowed(a netip.Addr) bool {
	for _, pr := range c.allow {
		if pr.Contains(a) {
			return true
		}
	}
	return false
}
