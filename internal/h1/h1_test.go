package h1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
)

// chunks feeds a reader in pieces, failing with a timeout between them.
type chunks struct {
	parts []string
	gap   bool
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.parts) == 0 {
		return 0, io.EOF
	}
	if c.gap {
		c.gap = false
		return 0, os.ErrDeadlineExceeded
	}
	n := copy(p, c.parts[0])
	c.parts[0] = c.parts[0][n:]
	if c.parts[0] == "" {
		c.parts = c.parts[1:]
		c.gap = true
	}
	return n, nil
}

func TestReadHeadResumesAfterTimeout(t *testing.T) {
	src := &chunks{parts: []string{"GET http://a/ HT", "TP/1.1\r\nHost: a\r", "\n\r", "\nnext"}}
	r := NewReader(src, 16)
	var timeouts int
	for {
		head, err := r.ReadHead(1024)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			timeouts++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if string(head) != "GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n" {
			t.Fatalf("head %q", head)
		}
		r.Release(head)
		break
	}
	if timeouts != 3 {
		t.Fatalf("%d timeouts; want 3 (one between each piece)", timeouts)
	}
	rest, _ := io.ReadAll(r)
	if string(rest) != "next" {
		t.Fatalf("after the head: %q", rest)
	}
	if len(r.buf) != 16 {
		t.Fatalf("buffer %d bytes after the head; want the small 16 again", len(r.buf))
	}
}

func TestReadHeadLimits(t *testing.T) {
	big := "GET http://a/ HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("x", 200) + "\r\n\r\n"
	if _, err := NewReader(strings.NewReader(big), 64).ReadHead(128); err != ErrHeadTooLarge {
		t.Fatalf("got %v; want ErrHeadTooLarge", err)
	}
	if h, err := NewReader(strings.NewReader(big), 64).ReadHead(1024); err != nil || len(h) != len(big) {
		t.Fatalf("got %d bytes, %v; want the whole head in a grown buffer", len(h), err)
	}
	if _, err := NewReader(strings.NewReader("GET http://a/ HTTP/1.1\r\nHo"), 64).ReadHead(1024); err != io.ErrUnexpectedEOF {
		t.Fatalf("truncated head: %v", err)
	}
	if _, err := NewReader(strings.NewReader(""), 64).ReadHead(1024); err != io.EOF {
		t.Fatalf("empty connection: %v", err)
	}
}

func TestRequestFacts(t *testing.T) {
	var r Request
	head := "GET http://Example.test:8080?q=1 HTTP/1.0\r\nHost: x\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nContent-Length: 0\r\n\r\n"
	if err := ParseRequest([]byte(head), &r); err != nil {
		t.Fatal(err)
	}
	if string(r.Host) != "Example.test" || string(r.Port) != "8080" || string(r.PathQuery) != "?q=1" || r.Form != AbsoluteForm {
		t.Fatalf("host %q port %q pq %q form %d", r.Host, r.Port, r.PathQuery, r.Form)
	}
	if !r.KeepAlive || r.Minor != 0 || r.ContentLength != 0 || len(r.ConnTokens) != 1 || string(r.ConnTokens[0]) != "X-Hop" {
		t.Fatalf("keepalive %v minor %d cl %d tokens %q", r.KeepAlive, r.Minor, r.ContentLength, r.ConnTokens)
	}
	hop := func(name string) bool {
		return Field{Name: []byte(name), Kind: KindOf([]byte(name))}.HopByHop(r.ConnTokens)
	}
	if !hop("x-hop") || hop("Host") {
		t.Fatal("hop-by-hop")
	}
	head = "GET http://a/ HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
	if err := ParseRequest([]byte(head), &r); err != nil || string(r.Upgrade) != "websocket" || !r.KeepAlive {
		t.Fatalf("upgrade %q keepalive %v err %v", r.Upgrade, r.KeepAlive, err)
	}
	head = "PUT http://a/ HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nConnection: close\r\n\r\n"
	if err := ParseRequest([]byte(head), &r); err != nil || !r.Expect100 || r.KeepAlive {
		t.Fatalf("expect %v keepalive %v err %v", r.Expect100, r.KeepAlive, err)
	}
	head = "PUT http://a/ HTTP/1.1\r\nHost: a\r\nExpect: magic\r\n\r\n"
	if err := ParseRequest([]byte(head), &r); err != ErrExpect || Status(err) != 417 {
		t.Fatalf("unknown expectation: %v", err)
	}
}

func TestResponseFraming(t *testing.T) {
	for _, tc := range []struct {
		head   string
		isHead bool
		want   Body
	}{
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", false, LengthBody},
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true, NoBody},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false, ChunkedBody},
		{"HTTP/1.1 200 OK\r\n\r\n", false, CloseBody},
		{"HTTP/1.1 204 No Content\r\n\r\n", false, NoBody},
		{"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n", false, NoBody},
		{"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", false, NoBody},
		{"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false, NoBody},
	} {
		var r Response
		if err := ParseResponse([]byte(tc.head), &r); err != nil {
			t.Fatalf("%q: %v", tc.head, err)
		}
		if got := r.BodyFor(tc.isHead); got != tc.want {
			t.Errorf("%q head=%v: body %d; want %d", tc.head, tc.isHead, got, tc.want)
		}
	}
}

func TestChunkedRoundTrip(t *testing.T) {
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	WriteChunk(w, []byte("hello "))
	WriteChunk(w, []byte(strings.Repeat("x", 300)))
	WriteLastChunk(w, []Field{{Name: []byte("X-Sum"), Value: []byte("42")}})
	w.Flush()
	r := NewReader(&out, 64)
	var b BodyReader
	b.Reset(r, ChunkedBody, 0, 1024)
	got, err := io.ReadAll(&b)
	if err != nil || string(got) != "hello "+strings.Repeat("x", 300) {
		t.Fatalf("%q %v", got, err)
	}
	if len(b.Trailer) != 1 || string(b.Trailer[0].Value) != "42" || !b.Done() {
		t.Fatalf("trailer %q done %v", b.Trailer, b.Done())
	}
}

func TestChunkedOverheadLimit(t *testing.T) {
	// One byte per chunk with a long extension each: net/http's overhead
	// rule refuses it, and so does h1.
	var body strings.Builder
	for i := 0; i < 200; i++ {
		body.WriteString("1;" + strings.Repeat("e", 100) + "\r\nx\r\n")
	}
	body.WriteString("0\r\n\r\n")
	var b BodyReader
	b.Reset(NewReader(strings.NewReader(body.String()), 4096), ChunkedBody, 0, 1024)
	if _, err := io.ReadAll(&b); err != ErrChunkOverhead {
		t.Fatalf("got %v; want ErrChunkOverhead", err)
	}
}

var benchHead = []byte("GET http://origin.test/obj?x=1 HTTP/1.1\r\nHost: origin.test\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\nProxy-Connection: Keep-Alive\r\n\r\n")

func BenchmarkParseRequest(b *testing.B) {
	var r Request
	b.ReportAllocs()
	b.SetBytes(int64(len(benchHead)))
	for b.Loop() {
		if err := ParseRequest(benchHead, &r); err != nil {
			b.Fatal(err)
		}
	}
}

var benchResp = []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1024\r\nDate: Mon, 30 Nov 2026 10:00:00 GMT\r\nServer: origin\r\n\r\n")

func BenchmarkParseResponse(b *testing.B) {
	var r Response
	b.ReportAllocs()
	for b.Loop() {
		if err := ParseResponse(benchResp, &r); err != nil {
			b.Fatal(err)
		}
	}
}

// TestKindOfAnyCase: a field is classified by its name in any case, a
// name that differs in one letter is Other, and no name (empty, too long)
// panics.
func TestKindOfAnyCase(t *testing.T) {
	for k := Kind(1); k < kinds; k++ {
		n := kindNames[k]
		for _, name := range []string{n, strings.ToLower(n), strings.ToUpper(n)} {
			if got := KindOf([]byte(name)); got != k {
				t.Errorf("KindOf(%q) = %d; want %d", name, got, k)
			}
		}
		for i := range len(n) {
			b := []byte(n)
			b[i] = 'q' // no kind's name has a q
			if got := KindOf(b); got != Other {
				t.Errorf("KindOf(%q) = %s; want Other", b, kindNames[got])
			}
		}
	}
	for _, name := range []string{"", "-", "0ontent-Length", strings.Repeat("x", 40), "@ost", "`ost"} {
		if got := KindOf([]byte(name)); got != Other {
			t.Errorf("KindOf(%q) = %s; want Other", name, kindNames[got])
		}
	}
}
