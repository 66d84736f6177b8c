package forwarding

import (
	"errors"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"

	"github.com/peerd/peerd/internal/h1"
	"github.com/peerd/peerd/internal/nexthop"
)

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

// FuzzProxyStatus: a member peerd writes reads back as its own error
// type, after any well-formed list (internal/nexthop's FuzzRead fuzzes
// the reading alone).
func FuzzProxyStatus(f *testing.F) {
	for _, s := range []string{`squid; error=destination_not_found`, `a, b; error="x, y"`, `x; details="\"`, `?1; a=-1.5`, `*; error=*a:b/c`} {
		f.Add(s, "squid", "connection_refused", "refused")
	}
	f.Add("", "p 1", "weird type", "quote \" and \\ and \x01")
	f.Fuzz(func(t *testing.T, v, name, errType, details string) {
		// Anything: no panic.
		nexthop.LastError([]byte(v))
		// parse(format(x)) == x: a member peerd would write, appended to
		// any well-formed list, reads back as its own error type.
		if errType == "" {
			return
		}
		item := string(appendSFItem(nil, errType))
		member := string(appendSFItem(nil, name)) + "; error=" + item + "; details=" + strconv.Quote(printable(details))
		for _, list := range []string{member, "upstream; error=dns_timeout, " + member} {
			if got, ok := nexthop.LastError([]byte(list)); !ok || got != item {
				t.Fatalf("%q: read back %q (ok %v); want %q", list, got, ok, item)
			}
		}
	})
}
