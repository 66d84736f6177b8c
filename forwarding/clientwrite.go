package forwarding

// This file holds the client writer, the only way to the client
// connection: every byte the client gets — heads, bodies, interim
// answers, error pages, a tunnel's bytes — is written here. It writes one
// final head per request at most (a second is an error its caller must
// handle, never bytes on the wire). It alone decides whether the
// connection carries another request (keepAlive, keeps), from what it is
// told — the client's wish, an answer whose end is the connection's,
// peerd stopping, the request's body not read whole — and whether the
// client is gone: one field, set in one place (lost), from its own
// writes, a read that failed, or an answer given up.

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/peerd/peerd/internal/h1"
)

// errHeadWritten: a final head already went to the client for this
// request; the caller must not write another.
var errHeadWritten = errors.New("a response head was already written to the client")

// clientWriter writes one client connection's answers.
type clientWriter struct {
	nc  net.Conn
	buf *bufio.Writer
	dw  deadlineWriter

	// One request's answer. headSent is raised by the one writer of its
	// final head; status is that head's.
	headSent atomic.Bool
	status   int
	// wants: the client asked to keep the connection; closes: this
	// answer is the connection's last (its end is the close, its framing
	// would be lost, or a head already said Connection: close). The
	// request's body (req) and the proxy's connections (conns, whether
	// peerd is stopping) are read where it is decided.
	wants, closes bool
	req           *reqBody
	conns         *connSet
	chunked       bool // the body being written is chunk-framed
	flushLater    bool // the end of the answer waits in buf for the next request's wait
	handedFrom    int64
	// gone: the client went away, or its connection broke. Set by lost.
	gone bool
}

func (w *clientWriter) init(nc net.Conn, dl *deadlines, rio *rawIO, conns *connSet) {
	w.nc, w.conns = nc, conns
	w.dw = deadlineWriter{dl: dl, rio: rio}
	w.buf = bufio.NewWriterSize(&w.dw, 4<<10)
}

// rebind makes the writer write to nc (a pooled connection's), keeping
// its buffer.
func (w *clientWriter) rebind(nc net.Conn) {
	w.nc = nc
	w.dw = deadlineWriter{dl: w.dw.dl, rio: w.dw.rio}
	w.buf.Reset(&w.dw)
}

// waitTimedOut says the last flushAndWait's wait for the next request
// ended at its deadline.
func (w *clientWriter) waitTimedOut() bool { return w.dw.waited && isTimeout(w.dw.waitErr) }

// begin starts a request's answer.
func (w *clientWriter) begin(writeTimeout time.Duration) {
	w.headSent.Store(false)
	w.status, w.wants, w.closes, w.chunked, w.flushLater, w.gone = 0, false, false, false, false, false
	w.dw.timeout = writeTimeout
	w.handedFrom = w.handed()
}

// lost records that the client is gone: the one place it is set.
func (w *clientWriter) lost() { w.gone = true }

// asked takes the client's wish for its connection: kept open after the
// answer (HTTP/1.1 by default, HTTP/1.0 with keep-alive) or not.
func (w *clientWriter) asked(keepAlive bool) { w.wants = keepAlive }

// last makes the answer the connection's last: its body ends with the
// connection (an HTTP/1.0 client's close-delimited body, a tunnel, a
// parent's refusal of one), or its framing is lost (an error that must
// close, an answer cut short).
func (w *clientWriter) last() { w.closes = true }

// keepAlive reports whether the answer being written leaves the
// connection open: the client wants it, the answer is not its last, the
// request's body was read whole (a body not read leaves the next
// request's framing unknown), and peerd is not stopping (the answer is
// then the connection's last, so that the client opens a new one for
// its next request instead of sending it on one about to close:
// HAProxy's idle-close-on-response).
func (w *clientWriter) keepAlive() bool {
	return w.wants && !w.closes && !w.gone && (w.req == nil || w.req.done) && (w.conns == nil || !w.conns.closing())
}

// connection appends the Connection field of the answer's head as
// decided now (close, or keep-alive to an HTTP/1.0 client that keeps
// it), and holds to it: an answer whose head said close is the last.
func (w *clientWriter) connection(b []byte, minor int) []byte {
	switch {
	case !w.keepAlive():
		w.closes = true
		return append(b, "Connection: close\r\n"...)
	case minor == 0:
		return append(b, "Connection: keep-alive\r\n"...)
	}
	return b
}

// keeps reports whether the connection carries another request once the
// answer is done: as its head said, with the request's body read whole
// and the client still there.
func (w *clientWriter) keeps() bool {
	return w.wants && !w.closes && !w.gone && (w.req == nil || w.req.done)
}

// readFailed hears that reading the client's connection failed with
// err: a framing error is the client's mistake, to be answered;
// anything else means the client is gone.
func (w *clientWriter) readFailed(err error) {
	var he h1.Error
	if !errors.As(err, &he) {
		w.lost()
	}
}

// abandon gives the answer up: nothing more goes to the client, and the
// connection ends (a stored body gone before any of it was sent, a
// stored body that broke off mid-way).
func (w *clientWriter) abandon() { w.lost() }

// writeHead writes the answer's one final head, whose status is status.
// A second head is refused with errHeadWritten, and nothing is written.
func (w *clientWriter) writeHead(status int, head []byte) error {
	if !w.headSent.CompareAndSwap(false, true) {
		return errHeadWritten
	}
	w.status = status
	return w.write(head)
}

// retract takes back an answer none of which reached the client yet (its
// head and body so far are still buffered), so that an error page can
// stand in for it; it reports false, changing nothing, once a byte of
// the answer went out.
func (w *clientWriter) retract() bool {
	if w.gone || w.dw.sent != w.handedFrom {
		return false
	}
	w.buf.Reset(&w.dw)
	w.headSent.Store(false)
	w.status, w.chunked = 0, false
	return true
}

// cutShort records that an answer already under way ended with an error
// (the access log says so; the client sees the connection cut).
func (w *clientWriter) cutShort(status int) { w.status = status }

// interim writes an interim (1xx) head before the final one.
func (w *clientWriter) interim(head []byte) error {
	if w.headSent.Load() {
		return errHeadWritten
	}
	if err := w.write(head); err != nil {
		return err
	}
	return w.flush()
}

// continue100 tells a client that asked for it to send its body.
func (w *clientWriter) continue100() error { return w.interim([]byte("HTTP/1.1 100 Continue\r\n\r\n")) }

// write buffers p for the client.
func (w *clientWriter) write(p []byte) error {
	if w.gone {
		return errClientGone
	}
	if _, err := w.buf.Write(p); err != nil {
		w.lost()
		return errClientGone
	}
	return nil
}

// Write is write as an io.Writer, for bodies read from the disk tier.
func (w *clientWriter) Write(p []byte) (int, error) {
	if err := w.write(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// bodyBytes writes a piece of the body, chunk-framed when the head said
// so.
func (w *clientWriter) bodyBytes(p []byte) error {
	if !w.chunked {
		return w.write(p)
	}
	if w.gone {
		return errClientGone
	}
	if err := h1.WriteChunk(w.buf, p); err != nil {
		w.lost()
		return errClientGone
	}
	return nil
}

// endBody ends a chunk-framed body with its trailer.
func (w *clientWriter) endBody(trailer []h1.Field) error {
	if !w.chunked {
		return nil
	}
	if err := h1.WriteLastChunk(w.buf, trailer); err != nil {
		w.lost()
		return errClientGone
	}
	return nil
}

// flush sends what is buffered.
func (w *clientWriter) flush() error {
	if w.gone {
		return errClientGone
	}
	if w.buf.Flush() != nil {
		w.lost()
		return errClientGone
	}
	return nil
}

// done ends an answer: with defer set, a connection that stays open
// sends its last bytes together with waiting for the next request (see
// flushAndWait); otherwise they are flushed now.
func (w *clientWriter) done(deferred bool) error {
	if deferred {
		w.flushLater = true
		return nil
	}
	return w.flush()
}

// copyFrom writes up to limit bytes of r as the body.
func (w *clientWriter) copyFrom(r io.Reader, limit int64) {
	io.Copy(w, io.LimitReader(r, limit))
	w.flush()
}

// errorPage writes e as a plain-text answer (the head only to HEAD);
// extra are more header lines. It reports errHeadWritten when a head
// already went out.
func (w *clientWriter) errorPage(e *Error, headOnly bool, extra string, scratch []byte) ([]byte, error) {
	body := "peerd: " + strconv.Itoa(e.Status) + " " + e.Code + ": " + explanations[e.Code]
	if e.Err != nil {
		body += "\n" + e.Err.Error()
	}
	body += "\n"
	b := append(scratch[:0], "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(append(append(b, ' '), http.StatusText(e.Status)...), "\r\nContent-Type: text/plain; charset=utf-8\r\nX-Peerd-Error: "...)
	b = append(b, e.Code...)
	if e.Peer != "" {
		b = append(append(b, "\r\nX-Peerd-Peer: "...), e.Peer...)
	}
	b = append(b, "\r\n"...)
	b = append(append(b, e.Fields...), extra...)
	b = append(b, "Cache-Control: no-store\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n"...)
	if !w.keepAlive() {
		w.closes = true
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(b, "\r\n"...)
	if !headOnly {
		b = append(b, body...)
	}
	if err := w.writeHead(e.Status, b); err != nil {
		return b, err
	}
	return b, w.flush()
}

// handed counts the bytes given to the writer so far: those written and
// those still buffered.
func (w *clientWriter) handed() int64 { return w.dw.sent + int64(w.buf.Buffered()) }

// sent counts what the client got for this request as Squid's access.log
// does (%<st): bytes still buffered when the client went away never left.
func (w *clientWriter) sent() int64 {
	n := w.handed()
	if w.gone {
		n = w.dw.sent
	}
	return max(n-w.handedFrom, 0)
}

// flushAndWait sends the rest of an answer and waits for the next
// request in one poll cycle (see rawIO). It reports whether the connection
// goes on: false when the client went away or stayed idle too long.
func (w *clientWriter) flushAndWait(idle time.Duration, waiting *atomic.Bool) bool {
	w.flushLater = false
	w.dw.wait, w.dw.idle, w.dw.waited, w.dw.waitErr = true, idle, false, nil
	err := w.buf.Flush()
	w.dw.wait = false
	waiting.Store(false)
	if err != nil {
		return false
	}
	return !w.dw.waited || w.dw.waitErr == nil
}

// deadlineWriter applies write_timeout to writes to the client: a client
// that accepts nothing for that long is cut. In wait mode (see
// flushAndWait) a write also waits for the next request.
type deadlineWriter struct {
	dl      *deadlines
	timeout time.Duration
	rio     *rawIO
	// wait mode: the client_idle_timeout, and the wait's outcome.
	wait    bool
	idle    time.Duration
	waited  bool
	waitErr error
	// sent counts the bytes written to the client, for the access log.
	sent int64
}

func (d *deadlineWriter) Write(b []byte) (int, error) {
	now := time.Now()
	if d.wait && d.rio.raw != nil {
		d.dl.readIn(now, d.idle)
		n, werr, rerr := d.rio.sendAndWait(b)
		d.sent += int64(n)
		if werr != nil {
			return n, werr
		}
		if n == len(b) {
			d.waited, d.waitErr = true, rerr
			return n, nil
		}
		b = b[n:] // the socket was full: the rest the usual way
		d.dl.writeIn(now, d.timeout)
		m, err := d.dl.nc.Write(b)
		d.sent += int64(m)
		return n + m, err
	}
	d.dl.writeIn(now, d.timeout)
	n, err := d.dl.nc.Write(b)
	d.sent += int64(n)
	return n, err
}

// spliceFrom moves the next n bytes of a body from up to the client in
// the kernel (splice(2), through net.TCPConn.ReadFrom), between two plain
// TCP connections: they never enter user space. Each round waits for up
// to readTimeout; a round that moved nothing ends the move. It returns
// the bytes moved.
func (w *clientWriter) spliceFrom(up *net.TCPConn, upDl *deadlines, n int64, readTimeout time.Duration) (int64, error) {
	dst, ok := w.nc.(*net.TCPConn)
	if !ok || w.gone {
		return 0, errClientGone
	}
	var moved int64
	for moved < n {
		now := time.Now()
		upDl.readIn(now, readTimeout)
		w.dw.dl.writeIn(now, w.dw.timeout)
		m, err := dst.ReadFrom(io.LimitReader(up, n-moved))
		moved += m
		w.dw.sent += m
		switch {
		case err == nil && moved < n:
			return moved, io.ErrUnexpectedEOF // the next hop closed early
		case err == nil:
		case isTimeout(err) && m > 0 && time.Since(now) < w.dw.timeout:
			// The round ended on the next hop's read deadline with
			// progress: the next round.
		default:
			if !isTimeout(err) || time.Since(now) >= w.dw.timeout {
				w.lost() // the client stopped taking bytes, or went away
			}
			return moved, err
		}
	}
	return moved, nil
}

// lingerClose closes a connection the way net/http does after an error
// answer: it stops sending, then reads and drops what the client still
// sends, for a short while, so that the kernel does not answer those
// bytes with a reset that destroys the answer before it is read.
func lingerClose(nc net.Conn) {
	if cw, ok := nc.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		nc.SetReadDeadline(time.Now().Add(lingerFor))
		io.CopyN(io.Discard, nc, lingerMax)
	}
	nc.Close()
}

// lingerFor and lingerMax bound a lingering close.
const (
	lingerFor = 500 * time.Millisecond
	lingerMax = 256 << 10
)
