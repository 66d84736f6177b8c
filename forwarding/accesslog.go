package forwarding

// This file holds the access log: Squid's native format, one line per
// request (and per ICP query answered), written without allocating.

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"
)

// appendLog formats the transaction in Squid's native access.log format:
//
//	time elapsed client result/status bytes method URL user hierarchy/host type [error:TYPE]
//
// (the last field only on answers peerd made itself, with the RFC 9209
// error type of their Proxy-Status)
// byte by byte, with no fmt: it runs once per request.
func (tx *txn) appendLog(b []byte, al *logView, elapsed time.Duration, hier string) []byte {
	b = appendStamp(b, tx.rq.start.Add(elapsed), elapsed)
	b = append(b, tx.rq.from.str...)
	b = append(b, ' ')
	b = append(b, tx.result()...)
	b = append(b, '/')
	b = appendPadded(b, int64(tx.w.status), 3, '0')
	b = append(b, ' ')
	b = strconv.AppendInt(b, tx.sentBytes(), 10)
	b = append(b, ' ')
	if tx.rq.method == "" {
		b = append(b, "NONE error:invalid-request"...)
	} else {
		b = append(b, tx.rq.method...)
		b = append(b, ' ')
		b = appendEscaped(b, al.loggedURL(tx.rq.req.Target))
	}
	b = append(b, ' ')
	switch {
	case tx.rq.user != "":
		b = appendEscaped(b, []byte(tx.rq.user)) // Squid %un
	case tx.rq.claimed != "":
		b = appendEscaped(b, []byte(tx.rq.claimed)) // as Squid logs a refused one
	default:
		b = append(b, '-')
	}
	b = append(b, ' ')
	if tx.icpTimedOut {
		b = append(b, "TIMEOUT_"...)
	}
	b = append(b, hier...)
	b = append(b, '/')
	switch {
	case !tx.hopped && !tx.errHop:
		b = append(b, '-')
	case tx.hop.Peer != nil:
		b = append(b, tx.hop.Peer.Host()...)
	default:
		b = appendEscaped(b, tx.rq.req.Host)
	}
	b = append(b, ' ')
	ctype := tx.contentType()
	if len(ctype) == 0 {
		b = append(b, '-')
	} else {
		for _, c := range ctype {
			if c != ' ' {
				b = append(b, c)
			}
		}
	}
	if tx.errType != "" {
		// An answer peerd made itself: its RFC 9209 error type, after
		// Squid's ten fields, so that a connect timeout reads as one.
		b = append(b, " error:"...)
		b = append(b, tx.errType...)
	}
	return append(b, '\n')
}

// result is the Squid result code of the transaction.
func (tx *txn) result() string {
	switch {
	case tx.cl.result != "" && !tx.w.gone:
		return tx.cl.result
	case tx.code == CodeAccessDenied, tx.code == CodeDenied, tx.code == CodeAuthRequired, tx.code == CodeAuthSlowed:
		return "TCP_DENIED"
	case tx.tunnelled && tx.hopped:
		return "TCP_TUNNEL"
	case tx.w.gone && tx.hopped:
		return "TCP_MISS_ABORTED"
	case tx.hopped:
		return "TCP_MISS"
	}
	return "NONE_NONE"
}

// appendStamp appends a line's first two fields, the time it ended
// (seconds.milliseconds) and how long it took (milliseconds, padded to
// six), each followed by a space.
func appendStamp(b []byte, end time.Time, took time.Duration) []byte {
	ms := end.UnixMilli()
	b = strconv.AppendInt(b, ms/1000, 10)
	b = append(b, '.')
	b = appendPadded(b, ms%1000, 3, '0')
	b = append(b, ' ')
	b = appendPadded(b, took.Milliseconds(), 6, ' ')
	return append(b, ' ')
}

func appendPadded(b []byte, n int64, width int, pad byte) []byte {
	var d [20]byte
	s := strconv.AppendInt(d[:0], n, 10)
	for i := len(s); i < width; i++ {
		b = append(b, pad)
	}
	return append(b, s...)
}

// icpLines are the buffers ICP answers' log lines are built in.
var icpLines = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// LogICP writes the access log line of an ICP query peerd answered, as
// Squid does (log_icp_queries): "UDP_MISS/000 SIZE ICP_QUERY URL -
// HIER_NONE/- -", SIZE being the reply's. The URL came off the network
// and is escaped as every logged URL is.
func (p *Proxy) LogICP(from netip.Addr, result string, size int, url []byte) {
	g := p.acquire()
	defer g.release()
	al := g.log
	if al == nil {
		return
	}
	bp := icpLines.Get().(*[]byte)
	b := appendStamp((*bp)[:0], time.Now(), 0)
	b = from.AppendTo(b)
	b = append(append(append(b, ' '), result...), "/000 "...)
	b = strconv.AppendInt(b, int64(size), 10)
	b = append(b, " ICP_QUERY "...)
	b = appendEscaped(b, al.loggedURL(url))
	b = append(b, " - HIER_NONE/- -\n"...)
	al.file.Write(b)
	*bp = b
	icpLines.Put(bp)
}

// appendEscaped appends s %-escaping what Squid escapes in its log: bytes
// that are not printable ASCII, space, and the quote and percent signs
// only where they would be ambiguous are kept (Squid keeps % as is).
func appendEscaped(b, s []byte) []byte {
	const hex = "0123456789ABCDEF"
	for _, c := range s {
		if c <= ' ' || c >= 0x7f || c == '"' {
			b = append(b, '%', hex[c>>4], hex[c&15])
			continue
		}
		b = append(b, c)
	}
	return b
}

// AccessLog writes lines to a file through a buffer flushed every second,
// so logging never waits on the disk in the request path. Reopen (on
// SIGUSR1) lets logrotate move the file away. How a line reads is each
// config generation's (logView).
type AccessLog struct {
	path string

	mu sync.Mutex // guards f and w
	f  *os.File
	w  *bufio.Writer

	stop chan struct{}
	done chan struct{}
}

// OpenAccessLog opens (appending to) path.
func OpenAccessLog(path string) (*AccessLog, error) {
	a := &AccessLog{path: path, stop: make(chan struct{}), done: make(chan struct{})}
	if err := a.Reopen(); err != nil {
		return nil, err
	}
	go a.flusher()
	return a, nil
}

// logView is the access log as one config generation writes it: the file
// (one for every generation that names the same path) with the
// generation's access_log_format and strip_query_terms, which a request
// keeps from its start to its end.
type logView struct {
	file *AccessLog
	// format is access_log_format (nil: Squid's native line).
	format *LogFormat
	// keepQuery logs URLs whole; by default their query is cut.
	keepQuery bool
}

// loggedURL is u as the log shows it: cut after its '?' unless the
// log keeps queries (Squid's strip_query_terms, the default).
func (v *logView) loggedURL(u []byte) []byte {
	if !v.keepQuery {
		if i := bytes.IndexByte(u, '?'); i >= 0 {
			return u[:i+1]
		}
	}
	return u
}

// Path is the file written.
func (a *AccessLog) Path() string { return a.path }

// Reopen flushes and reopens the file.
func (a *AccessLog) Reopen() error {
	f, err := os.OpenFile(a.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("access log: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.w != nil {
		a.w.Flush()
		a.f.Close()
	}
	a.f, a.w = f, bufio.NewWriterSize(f, 64<<10)
	return nil
}

// Write appends one formatted line.
func (a *AccessLog) Write(line []byte) {
	a.mu.Lock()
	a.w.Write(line)
	a.mu.Unlock()
}

// Flush writes buffered lines to the file.
func (a *AccessLog) Flush() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.w.Flush()
}

func (a *AccessLog) flusher() {
	defer close(a.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
			a.Flush()
		}
	}
}

// Close flushes and closes the file.
func (a *AccessLog) Close() error {
	close(a.stop)
	<-a.done
	a.mu.Lock()
	defer a.mu.Unlock()
	a.w.Flush()
	return a.f.Close()
}

// contentType is the Content-Type of the answer: the cache's when the
// cache answered, the relayed response's otherwise.
func (tx *txn) contentType() []byte {
	if len(tx.ctype) == 0 {
		return tx.cl.ctype
	}
	return tx.ctype
}
