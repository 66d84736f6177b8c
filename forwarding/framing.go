package forwarding

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// net/http accepts a request carrying both Content-Length and
// Transfer-Encoding: chunked by dropping Content-Length (RFC 9112 6.3 allows
// that). peerd re-frames every body it forwards, so such a request cannot
// desync a parent through it, but a proxy should not guess at ambiguous
// framing at all: it is the signature of request smuggling. The header is
// gone by the time a handler runs, so each client connection is wrapped in
// a framingConn that watches request heads as they are read and remembers
// the request lines whose heads carried both headers.

// Listener wraps ln so that ServeHTTP can reject ambiguously framed
// requests; use ConnContext with it on the http.Server.
func Listener(ln net.Listener) net.Listener { return framingListener{ln} }

type framingListener struct{ net.Listener }

func (l framingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &framingConn{Conn: c}, nil
}

type framingConnKey struct{}

// ConnContext is the http.Server hook that makes the connection's framing
// record available to ServeHTTP.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*framingConn); ok {
		return context.WithValue(ctx, framingConnKey{}, fc)
	}
	return ctx
}

const keepPrefix = 96

// framingConn scans the bytes read for request heads. Per byte it does a
// few comparisons; it stops scanning once the connection becomes a tunnel.
type framingConn struct {
	net.Conn
	off atomic.Bool // set when hijacked for a tunnel

	mu        sync.Mutex
	prefix    []byte // first keepPrefix bytes of the current line
	suffix    [10]byte
	lineLen   int
	inHead    bool
	head      []byte // request line of the current head (prefix)
	sawCL     bool
	sawTE     bool
	ambiguous [][]byte // request line prefixes of ambiguous heads
}

func (c *framingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.off.Load() {
		c.mu.Lock()
		c.scan(b[:n])
		c.mu.Unlock()
	}
	return n, err
}

func (c *framingConn) scan(b []byte) {
	for _, ch := range b {
		if ch == '\n' {
			c.endLine()
			continue
		}
		if len(c.prefix) < keepPrefix {
			c.prefix = append(c.prefix, ch)
		}
		copy(c.suffix[:], c.suffix[1:])
		c.suffix[len(c.suffix)-1] = ch
		c.lineLen++
	}
}

func (c *framingConn) endLine() {
	line := bytes.TrimSuffix(c.prefix, []byte("\r"))
	full := c.lineLen
	if full > 0 && c.suffix[len(c.suffix)-1] == '\r' {
		full--
	}
	switch {
	case !c.inHead:
		if isRequestLine(line, c.suffix[:]) {
			c.inHead, c.sawCL, c.sawTE = true, false, false
			c.head = append(c.head[:0], line...)
		}
	case full == 0:
		c.inHead = false
		if c.sawCL && c.sawTE {
			if len(c.ambiguous) >= 16 {
				c.ambiguous = c.ambiguous[1:]
			}
			c.ambiguous = append(c.ambiguous, append([]byte(nil), c.head...))
		}
	case hasPrefixFold(line, "content-length:"):
		c.sawCL = true
	case hasPrefixFold(line, "transfer-encoding:"):
		c.sawTE = true
	}
	c.prefix = c.prefix[:0]
	c.lineLen = 0
	c.suffix = [10]byte{}
}

func isRequestLine(prefix, suffix []byte) bool {
	sp := bytes.IndexByte(prefix, ' ')
	if sp < 1 {
		return false
	}
	for _, ch := range prefix[:sp] {
		if ch < 'A' || ch > 'Z' {
			return false
		}
	}
	s := bytes.TrimSuffix(suffix, []byte("\r"))
	return bytes.HasSuffix(s, []byte("HTTP/1.1")) || bytes.HasSuffix(s, []byte("HTTP/1.0"))
}

func hasPrefixFold(b []byte, p string) bool {
	return len(b) >= len(p) && bytes.EqualFold(b[:len(p)], []byte(p))
}

// ambiguousFraming reports whether r's head carried both Content-Length
// and Transfer-Encoding.
func ambiguousFraming(r *http.Request) bool {
	if len(r.TransferEncoding) == 0 {
		return false
	}
	fc, ok := r.Context().Value(framingConnKey{}).(*framingConn)
	if !ok {
		return false
	}
	want := []byte(r.Method + " " + r.RequestURI)
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for _, h := range fc.ambiguous {
		n := min(len(h), len(want))
		if bytes.Equal(h[:n], want[:n]) {
			return true
		}
	}
	return false
}

// stopFraming ends scanning on a connection that became a tunnel.
func stopFraming(c net.Conn) {
	if fc, ok := c.(*framingConn); ok {
		fc.off.Store(true)
	}
}
