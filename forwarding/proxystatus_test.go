package forwarding

import (
	"errors"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"

	"github.com/peerd/peerd/internal/h1"
)

func TestLastMemberError(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want string
		ok   bool
	}{
		{`squid; error=destination_not_found`, "destination_not_found", true},
		{`origin-cdn; fwd-status=200, squid; error=connection_refused; details="refused"`, "connection_refused", true},
		{`squid; error=connection_refused, peerd; next-hop=p1; fwd-status=502`, "", false},
		{`squid; details="a, b; error=x"; error=http_request_denied`, "http_request_denied", true},
		{`"quoted name"; error=connection_timeout`, "connection_timeout", true},
		{`squid; error=`, "", false},
		{`; error=x`, "", false},
		{`squid error=x`, "", false},
		{``, "", false},
		{`a, b; received-status=503; error=destination_unavailable`, "destination_unavailable", true},
	} {
		got, ok := lastMemberError([]byte(tc.v))
		if got != tc.want || ok != tc.ok {
			t.Errorf("%q: %q %v; want %q %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}

func TestErrorTypes(t *testing.T) {
	refused := &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, tc := range []struct {
		e    *Error
		want string
	}{
		{&Error{Code: CodeConnectFailed, Err: refused}, psConnectionRefused},
		{&Error{Code: CodeConnectFailed, Err: os.ErrDeadlineExceeded}, psConnectionTimeout},
		{&Error{Code: CodeConnectFailed, Err: &net.DNSError{Err: "no such host", IsNotFound: true}}, psDestinationNotFound},
		{&Error{Code: CodeBadGateway, Err: h1.ErrHeadTooLarge}, psResponseHeaderSize},
		{&Error{Code: CodeBadGateway, Err: h1.ErrChunkSize}, psResponseIncomplete},
		{&Error{Code: CodeBadGateway, Err: errors.New("EOF")}, psConnectionTerminated},
		{&Error{Code: CodeNoPeers}, psDestinationUnavailable},
		{&Error{Code: CodeTimeout}, psResponseTimeout},
		{&Error{Code: CodeDenied}, psRequestDenied},
		{&Error{Code: CodeAccessDenied}, psRequestDenied},
		{&Error{Code: CodeBadRequest}, psRequestError},
		{&Error{Code: CodeLoopDetected}, psLoopDetected},
	} {
		if got := errorType(tc.e); got != tc.want {
			t.Errorf("%s %v: %s; want %s", tc.e.Code, tc.e.Err, got, tc.want)
		}
	}
}

// FuzzProxyStatus: a parent's Proxy-Status never crashes peerd, and an
// error type read from it is one structured-field item.
func FuzzProxyStatus(f *testing.F) {
	for _, s := range []string{`squid; error=destination_not_found`, `a, b; error="x, y"`, `x; details="\"`, `?1; a=-1.5`, `*; error=*a:b/c`} {
		f.Add(s, "squid", "connection_refused", "refused")
	}
	f.Add("", "p 1", "weird type", "quote \" and \\ and \x01")
	f.Fuzz(func(t *testing.T, v, name, errType, details string) {
		// Anything: no panic, and what is accepted is an item.
		got, ok := lastMemberError([]byte(v))
		if !ok && got != "" {
			t.Fatalf("%q: %q without ok", v, got)
		}
		if ok {
			if _, fine := skipBareItem([]byte(got), 0); !fine && got != "" {
				t.Fatalf("%q: error type %q is not an item", v, got)
			}
		}
		// parse(format(x)) == x: a member peerd would write, appended to
		// any well-formed list, reads back as its own error type.
		if errType == "" {
			return
		}
		item := string(appendSFItem(nil, errType))
		member := string(appendSFItem(nil, name)) + "; error=" + item + "; details=" + strconv.Quote(printable(details))
		for _, list := range []string{member, "upstream; error=dns_timeout, " + member} {
			if got, ok := lastMemberError([]byte(list)); !ok || got != item {
				t.Fatalf("%q: read back %q (ok %v); want %q", list, got, ok, item)
			}
		}
	})
}
