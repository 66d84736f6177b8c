package forwarding

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/peerd/peerd/internal/h1"
)

// newTestWriter is a client writer on one end of a pipe; the bytes the
// client gets are collected from the other end.
func newTestWriter(t *testing.T) (*clientWriter, func() string) {
	t.Helper()
	srv, cli := net.Pipe()
	w := &clientWriter{}
	dl := &deadlines{nc: srv}
	w.init(srv, dl, &rawIO{}, nil)
	w.begin(time.Minute)
	var got bytes.Buffer
	done := make(chan struct{})
	go func() {
		io.Copy(&got, cli)
		close(done)
	}()
	return w, func() string {
		srv.Close()
		<-done
		return got.String()
	}
}

// TestHeadGuardRace: two writers race to write a response head for one
// request. Exactly one head reaches the client; the loser is told so
// (errHeadWritten) and writes nothing; the status kept is the winner's.
func TestHeadGuardRace(t *testing.T) {
	for i := 0; i < 200; i++ {
		w, wire := newTestWriter(t)
		heads := map[int]string{200: "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 502: "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n"}
		errs := map[int]error{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for status, head := range heads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				err := w.writeHead(status, []byte(head))
				mu.Lock()
				errs[status] = err
				mu.Unlock()
			}()
		}
		close(start)
		wg.Wait()
		won := -1
		for status, err := range errs {
			switch {
			case err == nil && won == -1:
				won = status
			case err == nil:
				t.Fatal("both writers wrote a head")
			case !errors.Is(err, errHeadWritten):
				t.Fatalf("the loser got %v; want errHeadWritten", err)
			}
		}
		if won == -1 {
			t.Fatal("no writer wrote the head")
		}
		if w.status != won {
			t.Fatalf("status %d; want the winner's %d", w.status, won)
		}
		w.flush()
		got := wire()
		if got != heads[won] || strings.Count(got, "HTTP/1.1") != 1 {
			t.Fatalf("the client got %q; want exactly the winner's head", got)
		}
	}
}

// TestClientWriterAfterHead: once the head went out, an error page is
// refused (the caller cuts the answer short instead), an interim answer
// is refused, and a client that went away is known in one place.
func TestClientWriterAfterHead(t *testing.T) {
	w, wire := newTestWriter(t)
	w.asked(true)
	if err := w.interim([]byte("HTTP/1.1 103 Early Hints\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if err := w.writeHead(200, []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if err := w.interim([]byte("HTTP/1.1 103 Early Hints\r\n\r\n")); !errors.Is(err, errHeadWritten) {
		t.Fatalf("an interim answer after the head: %v", err)
	}
	w.bodyBytes([]byte("ok"))
	if _, err := w.errorPage(errorf(502, CodeBadGateway, "", "late"), false, "", nil); !errors.Is(err, errHeadWritten) {
		t.Fatalf("an error page after the head: %v", err)
	}
	w.flush()
	got := wire()
	if got != "HTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" {
		t.Fatalf("the client got %q", got)
	}
	if w.gone {
		t.Fatal("gone before any write failed")
	}
	w.bodyBytes(bytes.Repeat([]byte("x"), 8<<10)) // past the buffer: to the closed pipe
	w.flush()
	if !w.gone || w.flush() == nil {
		t.Fatal("a failed write did not mark the client gone")
	}
}

// TestClientWriterDecidesKeepAlive: whether the connection carries
// another request is the client writer's decision, from what it is told:
// the client's wish, an answer that is the connection's last, a request
// body not read whole, peerd stopping, the client gone; what the head
// said holds to the end of the answer.
func TestClientWriterDecidesKeepAlive(t *testing.T) {
	for _, tc := range []struct {
		name      string
		set       func(w *clientWriter, body *reqBody, conns *connSet)
		minor     int
		field     string
		keepsOpen bool
	}{
		{"HTTP/1.1, kept", func(*clientWriter, *reqBody, *connSet) {}, 1, "", true},
		{"HTTP/1.0 keep-alive", func(*clientWriter, *reqBody, *connSet) {}, 0, "Connection: keep-alive\r\n", true},
		{"the client asked to close", func(w *clientWriter, _ *reqBody, _ *connSet) { w.asked(false) }, 1, "Connection: close\r\n", false},
		{"the answer is the last", func(w *clientWriter, _ *reqBody, _ *connSet) { w.last() }, 1, "Connection: close\r\n", false},
		{"the body not read whole", func(_ *clientWriter, b *reqBody, _ *connSet) { b.done = false }, 1, "Connection: close\r\n", false},
		{"peerd stopping", func(_ *clientWriter, _ *reqBody, c *connSet) { c.shutting.Store(true) }, 1, "Connection: close\r\n", false},
		{"the client's read side broke", func(w *clientWriter, _ *reqBody, _ *connSet) { w.readFailed(io.ErrUnexpectedEOF) }, 1, "Connection: close\r\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &clientWriter{}
			body, conns := &reqBody{done: true}, &connSet{}
			w.init(nil, nil, nil, conns)
			w.req = body
			w.begin(time.Minute)
			w.asked(true)
			tc.set(w, body, conns)
			if got := string(w.connection(nil, tc.minor)); got != tc.field {
				t.Fatalf("Connection field %q; want %q", got, tc.field)
			}
			body.done, conns.shutting = true, atomic.Bool{} // too late: the head said what it said
			if got := w.keeps(); got != tc.keepsOpen {
				t.Fatalf("keeps %v once the answer is done; want %v", got, tc.keepsOpen)
			}
		})
	}
	// A framing error in the client's body is its mistake: the client
	// is not gone, and is answered.
	w := &clientWriter{}
	w.init(nil, nil, nil, nil)
	w.readFailed(h1.ErrFieldLine)
	if w.gone {
		t.Fatal("a framing error made the client gone")
	}
}
