package forwarding

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// Entry is one access log line.
type Entry struct {
	Time        time.Time
	Elapsed     time.Duration
	Client      string
	Result      string // Squid result code, e.g. TCP_MISS
	Status      int
	Bytes       int64
	Method      string
	URL         string
	Hierarchy   string
	PeerHost    string
	ContentType string
}

// String formats e in Squid's native access.log format:
// time elapsed client result/status bytes method URL user hierarchy/host type
func (e Entry) String() string {
	ct := e.ContentType
	if ct == "" {
		ct = "-"
	}
	host := e.PeerHost
	if host == "" {
		host = "-"
	}
	ms := e.Time.UnixMilli()
	return fmt.Sprintf("%d.%03d %6d %s %s/%03d %d %s %s - %s/%s %s\n",
		ms/1000, ms%1000, e.Elapsed.Milliseconds(), e.Client, e.Result, e.Status, e.Bytes,
		e.Method, e.URL, e.Hierarchy, host, strings.ReplaceAll(ct, " ", ""))
}

func (ex *exchange) entry(elapsed time.Duration, bytes int64, contentType string) Entry {
	e := Entry{Time: ex.start.Add(elapsed), Elapsed: elapsed, Client: ex.client, Status: ex.status,
		Bytes: bytes, Method: ex.method, URL: ex.url, Hierarchy: ex.hierarchy(), ContentType: contentType}
	switch {
	case ex.code == CodeAccessDenied:
		e.Result = "TCP_DENIED"
	case ex.tunnel && ex.hopped:
		e.Result = "TCP_TUNNEL"
		e.Bytes = ex.tunnelBytes
	case ex.clientGone:
		e.Result = "TCP_MISS_ABORTED"
	case ex.hopped:
		e.Result = "TCP_MISS"
	default:
		e.Result = "NONE_NONE"
	}
	if ex.hopped {
		if ex.hop.Peer != nil {
			e.PeerHost = ex.hop.Peer.Host()
		} else {
			e.PeerHost = hostOf(ex.url)
		}
	}
	return e
}

func hostOf(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		u = u[i+3:]
	}
	if i := strings.IndexAny(u, "/?#"); i >= 0 {
		u = u[:i]
	}
	if i := strings.LastIndex(u, ":"); i >= 0 && !strings.HasSuffix(u, "]") {
		u = u[:i]
	}
	return u
}

// AccessLog writes Entry lines to a file through a buffer flushed every
// second, so logging never waits on the disk in the request path. Reopen
// (on SIGUSR1) lets logrotate move the file away.
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

// Log appends one entry.
func (a *AccessLog) Log(e Entry) {
	line := e.String()
	a.mu.Lock()
	a.w.WriteString(line)
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
