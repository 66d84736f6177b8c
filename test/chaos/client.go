package main

// This file holds the clients and the invariants checked on every
// exchange: a 2xx body is byte-exact the origin's object for its URL and
// version, and an uncacheable or POST answer is the one made for this
// exchange (I1); a client sees a cut body only where the origin cut it,
// and any other failure is an answer peerd made itself, whole (I2); what
// the cache serves was never stored from a cut or failed answer (I5).

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// verdict is how one exchange ended.
type verdict struct {
	outcome   string // ok, peerd_error, relayed_error, origin_cut, violation
	invariant string // the violated invariant (violation only)
	detail    string
}

func violation(inv, format string, args ...any) verdict {
	return verdict{outcome: "violation", invariant: inv, detail: fmt.Sprintf(format, args...)}
}

// client is one worker's connections, one per member it asks.
type client struct {
	seed  uint64
	start time.Time
	rec   *record
	conns [2]*clientConn
}

type clientConn struct {
	nc   net.Conn
	br   *bufio.Reader
	used bool // it carried an exchange before (a keep-alive reuse)
}

// exchangeTimeout bounds one exchange: far above a stall, a late head and
// a trickle together.
const exchangeTimeout = 20 * time.Second

// do runs exchange e against the members' proxy addresses.
func (c *client) do(e exchange, proxies [2]string) verdict {
	for try := 0; ; try++ {
		cc, err := c.conn(e, proxies)
		if err != nil {
			return violation("I2", "cannot connect to member %d: %v", e.member, err)
		}
		if e.idle > 0 && try == 0 && cc.used {
			time.Sleep(e.idle) // the connection is parked meanwhile
			c.rec.parkedSend()
		}
		v, reusedEmpty := c.exchange(cc, e)
		if !reusedEmpty || try > 0 {
			return v
		}
		// A keep-alive connection the server closed as the request went
		// out (nothing of an answer came): a client sends a GET or HEAD
		// again on a new connection (RFC 9112 9.3.1).
		if e.kind == post {
			return violation("I2", "a POST on a kept-alive connection got no answer at all (closed under it)")
		}
	}
}

func (c *client) conn(e exchange, proxies [2]string) (*clientConn, error) {
	if !e.oneShot && c.conns[e.member] != nil {
		return c.conns[e.member], nil
	}
	nc, err := net.DialTimeout("tcp", proxies[e.member], 5*time.Second)
	if err != nil {
		return nil, err
	}
	cc := &clientConn{nc: nc, br: bufio.NewReader(nc)}
	if !e.oneShot {
		c.conns[e.member] = cc
	}
	return cc, nil
}

func (c *client) drop(e exchange, cc *clientConn) {
	cc.nc.Close()
	if c.conns[e.member] == cc {
		c.conns[e.member] = nil
	}
}

func (c *client) close() {
	for i, cc := range c.conns {
		if cc != nil {
			cc.nc.Close()
			c.conns[i] = nil
		}
	}
}

// postBody is exchange id's POST body.
func postBody(id uint64) []byte { return body("/post", id, 200+int(id%3000)) }

// path is what exchange e asks for.
func (e exchange) path() string {
	switch e.kind {
	case getFresh:
		return fmt.Sprintf("/u/%d", e.id)
	case post:
		return fmt.Sprintf("/p/%d", e.id)
	case tunnel:
		return fmt.Sprintf("echo-%d.chaos.test:7", e.id)
	}
	return cachedPath(e.object)
}

// request is exchange e's bytes.
func (c *client) request(e exchange) string {
	var b strings.Builder
	path := e.path()
	method := "GET"
	switch e.kind {
	case head:
		method = "HEAD"
	case post:
		method = "POST"
	case tunnel:
		fmt.Fprintf(&b, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, path)
		return b.String()
	}
	fmt.Fprintf(&b, "%s http://origin.chaos.test%s HTTP/1.1\r\nHost: origin.chaos.test\r\nX-Chaos-Id: %d\r\ntraceparent: %s\r\n", method, path, e.id, traceparent(e.id))
	switch e.kind {
	case conditional:
		fmt.Fprintf(&b, "If-None-Match: %s\r\n", etag(versionAt(time.Since(c.start))))
	case ranged:
		fmt.Fprintf(&b, "Range: bytes=%d-%d\r\n", e.rangeLo, e.rangeLo+e.rangeLen-1)
	case post:
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(postBody(e.id)))
	}
	if e.oneShot {
		b.WriteString("Connection: close\r\n")
	}
	b.WriteString("\r\n")
	if e.kind == post {
		b.Write(postBody(e.id))
	}
	return b.String()
}

// exchange sends e on cc and judges the answer. reusedEmpty reports a
// kept-alive connection that closed with nothing of an answer.
func (c *client) exchange(cc *clientConn, e exchange) (v verdict, reusedEmpty bool) {
	reused := cc.used
	cc.used = true
	began := time.Now()
	cc.nc.SetDeadline(time.Now().Add(exchangeTimeout))
	if _, err := io.WriteString(cc.nc, c.request(e)); err != nil && !reused {
		c.drop(e, cc)
		return violation("I2", "writing the request: %v", err), false
	}
	method := "GET"
	switch e.kind {
	case head:
		method = "HEAD"
	case tunnel:
		method = "CONNECT"
	}
	resp, err := http.ReadResponse(cc.br, &http.Request{Method: method})
	if err != nil {
		c.drop(e, cc)
		if reused && cc.br.Buffered() == 0 && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isReset(err)) {
			return verdict{}, true
		}
		return violation("I2", "no whole response head: %v", err), false
	}
	if e.kind == tunnel {
		v = c.tunnelEcho(cc, e, resp)
		c.drop(e, cc)
		if v.outcome == "violation" && c.rec.killedBetween(c.rec.tunnelParent(e.id), began, time.Now()) {
			v = verdict{outcome: "origin_cut"} // the parent died under the tunnel
		}
		return v, false
	}
	got, readErr := io.ReadAll(resp.Body)
	resp.Body.Close()
	if readErr != nil || resp.Close || e.oneShot {
		c.drop(e, cc)
	}
	if readErr != nil && !fromStore(resp) && c.rec.killedBetween(resp.Header.Get("X-Chaos-Parent"), began, time.Now()) {
		// The parent died under the body: its path to the origin is
		// gone, and the cut is the origin's, as far as peerd can know.
		return verdict{outcome: "origin_cut"}, false
	}
	return c.judge(e, resp, got, readErr), false
}

func isReset(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && strings.Contains(oe.Err.Error(), "reset")
}

// fromStore reports whether the answer came out of a cache (a hit, not
// a follower of a fetch): a cut or a wrong body there was stored (I5).
func fromStore(resp *http.Response) bool {
	for _, cs := range resp.Header.Values("Cache-Status") {
		for _, member := range strings.Split(cs, ",") {
			if strings.Contains(member, "; hit") && !strings.Contains(member, "collapsed") {
				return true
			}
		}
	}
	return false
}

// judge checks one answer read whole (or cut, readErr).
func (c *client) judge(e exchange, resp *http.Response, got []byte, readErr error) verdict {
	f := resp.Header.Get("X-Chaos-Fault")
	stored := fromStore(resp)
	if readErr != nil {
		switch {
		case stored:
			return violation("I5", "a cut body from the cache (%d of its bytes: %v)", len(got), readErr)
		case f == shortBody.String() || f == badChunk.String() || f == resetBody.String():
			return verdict{outcome: "origin_cut"}
		}
		return violation("I2", "a cut body the origin did not cut (status %d, fault %q from %s, Cache-Status %q, %d bytes: %v)",
			resp.StatusCode, f, resp.Header.Get("X-Chaos-Parent"), resp.Header.Values("Cache-Status"), len(got), readErr)
	}
	if resp.Header.Get("X-Peerd-Error") != "" {
		if resp.StatusCode < 400 {
			return violation("I2", "a peerd error with status %d", resp.StatusCode)
		}
		return verdict{outcome: "peerd_error", detail: resp.Header.Get("X-Peerd-Error")}
	}
	if (f == own503.String() && resp.StatusCode == 503) || (f == origin5xx.String() && resp.StatusCode == 500) || saidBeyond(f, resp.StatusCode) {
		return verdict{outcome: "relayed_error"}
	}
	inv := "I1"
	if stored {
		inv = "I5"
	}
	switch e.kind {
	case getFresh, post:
		if resp.StatusCode != 200 {
			return violation(inv, "status %d", resp.StatusCode)
		}
		if s := resp.Header.Get("X-Chaos-Served"); s != strconv.FormatUint(e.id, 10) {
			return violation("I1", "the answer made for exchange %q, not this one (%s)", s, answerFacts(resp, got))
		}
		want := body(fmt.Sprintf("/u/%d", e.id), e.id, 1000)
		if e.kind == post {
			sum := sha256.Sum256(postBody(e.id))
			want = []byte(hex.EncodeToString(sum[:]))
		}
		if !bytes.Equal(got, want) {
			return violation(inv, "body of %d bytes is not the origin's %d", len(got), len(want))
		}
		return verdict{outcome: "ok"}
	}
	path, size := cachedPath(e.object), objectSize(e.object)
	version := versionOf(resp.Header.Get("ETag"))
	switch {
	case resp.StatusCode == 304 && e.kind == conditional && version > 0:
		return verdict{outcome: "ok"}
	case resp.StatusCode == 200 && e.kind == head:
		if len(got) != 0 || resp.ContentLength != int64(size) {
			return violation(inv, "HEAD: %d body bytes, Content-Length %d; want 0 and %d", len(got), resp.ContentLength, size)
		}
		return verdict{outcome: "ok"}
	case resp.StatusCode == 200 && version > 0:
		if want := body(path, version, size); !bytes.Equal(got, want) {
			return violation(inv, "%s v%d: %d bytes, not the origin's %d (%s; %s)", path, version, len(got), len(want),
				answerFacts(resp, got), whichBody(path, version, size, got))
		}
		return verdict{outcome: "ok"}
	case resp.StatusCode == 206 && e.kind == ranged && version > 0:
		want := body(path, version, size)[e.rangeLo : e.rangeLo+e.rangeLen]
		wantRange := fmt.Sprintf("bytes %d-%d/%d", e.rangeLo, e.rangeLo+e.rangeLen-1, size)
		if cr := resp.Header.Get("Content-Range"); cr != wantRange || !bytes.Equal(got, want) {
			return violation(inv, "206 %q with %d bytes; want %q and those bytes of v%d", cr, len(got), wantRange, version)
		}
		return verdict{outcome: "ok"}
	}
	return violation(inv, "%s: status %d, ETag %q, fault %q (%s)", e.kind, resp.StatusCode, resp.Header.Get("ETag"), f, answerFacts(resp, got))
}

// whichBody says where got parts from the body of v: the first byte that
// differs, and which nearby version's body it is, if any.
func whichBody(path string, v uint64, size int, got []byte) string {
	want := body(path, v, size)
	at := 0
	for at < len(got) && at < len(want) && got[at] == want[at] {
		at++
	}
	for d := uint64(1); d <= 5; d++ {
		for _, w := range []uint64{v - d, v + d} {
			if w > 0 && bytes.Equal(got, body(path, w, size)) {
				return fmt.Sprintf("first difference at byte %d; it is v%d's body", at, w)
			}
		}
	}
	return fmt.Sprintf("first difference at byte %d; no nearby version's body", at)
}

// answerFacts are what a violation report needs to tell where an answer
// came from: which parent, under which fault, through which cache, and
// whether it was bytes a parent sent past the end of another answer.
func answerFacts(resp *http.Response, got []byte) string {
	h := resp.Header
	return fmt.Sprintf("parent %q, fault %q, smuggled %q, ETag %q, Cache-Status %q, Via %q, X-Cache %q, %d body bytes",
		h.Get("X-Chaos-Parent"), h.Get("X-Chaos-Fault"), h.Get("X-Chaos-Smuggled"), h.Get("ETag"), h.Values("Cache-Status"), h.Get("Via"), h.Values("X-Cache"), len(got))
}

// tunnelEcho checks a CONNECT: a tunnel that echoes, or an error
// answer.
func (c *client) tunnelEcho(cc *clientConn, e exchange, resp *http.Response) verdict {
	f := resp.Header.Get("X-Chaos-Fault")
	switch {
	case resp.StatusCode == 200:
	case resp.Header.Get("X-Peerd-Error") != "" && resp.StatusCode >= 400:
		return verdict{outcome: "peerd_error", detail: resp.Header.Get("X-Peerd-Error")}
	case f == own503.String() && resp.StatusCode == 503, saidBeyond(f, resp.StatusCode):
		return verdict{outcome: "relayed_error"}
	default:
		return violation("I2", "CONNECT: status %d, fault %q", resp.StatusCode, f)
	}
	msg := body("/tunnel", e.id, 1000)
	parts := [][]byte{msg}
	if e.idle > 0 {
		// Half, then a pause that leaves the tunnel idle (both its
		// directions wait in peerd's epoll set), then the rest.
		parts = [][]byte{msg[:500], msg[500:]}
	}
	for i, part := range parts {
		if i > 0 {
			time.Sleep(e.idle)
			c.rec.parkedSend()
		}
		if _, err := cc.nc.Write(part); err != nil {
			return violation("I2", "CONNECT: writing into the tunnel: %v", err)
		}
		back := make([]byte, len(part))
		if _, err := io.ReadFull(cc.br, back); err != nil {
			return violation("I2", "CONNECT: reading the echo at %s: %v (%s; kills of that parent at %v)", time.Now().Format("15:04:05.000"),
				err, answerFacts(resp, nil)+", tunnel through "+c.rec.tunnelParent(e.id), c.rec.killTimes(c.rec.tunnelParent(e.id)))
		}
		if !bytes.Equal(back, part) {
			return violation("I1", "CONNECT: the echo differs from what was sent")
		}
	}
	return verdict{outcome: "ok"}
}

// saidBeyond reports a parent's answer that says its own next hop failed
// (nothing reached the origin), relayed when no other parent was left to
// try or the retry budget was spent.
func saidBeyond(f string, status int) bool {
	return status == 503 && (f == nextHopFailed.String() || f == unreachableOrigin.String() || f == noNextHop.String())
}
