package h1

// This file holds the buffered reader heads and bodies are parsed from.

import (
	"bytes"
	"io"
)

// Reader is a buffered reader for one connection. Unlike bufio.Reader its
// buffer grows on demand (up to the head limit the caller gives) so that a
// whole message head is one contiguous slice, and shrinks back afterwards,
// so that thousands of idle connections each hold only the small buffer.
//
// A read error is returned once and the data read so far stays buffered:
// after a timeout the caller may simply call again (a head is resumable).
type Reader struct {
	src  io.Reader
	buf  []byte
	r, w int
	// scan is how far ReadHead has checked the buffered bytes, relative to
	// r, so that a head arriving in pieces is scanned once.
	scan int
	// small is the buffer to return to after a large head.
	small []byte
}

// NewReader returns a Reader over src with a buffer of size bytes.
func NewReader(src io.Reader, size int) *Reader {
	b := make([]byte, size)
	return &Reader{src: src, buf: b, small: b}
}

// Reset discards buffered data and reads from src.
func (b *Reader) Reset(src io.Reader) {
	b.src = src
	b.buf = b.small
	b.r, b.w, b.scan = 0, 0, 0
}

// Shed gives up the buffer (what it held must have been taken): a reader
// whose connection now only relays (a tunnel) keeps none. A shed reader
// reads nothing (Fill fails).
func (b *Reader) Shed() {
	b.buf, b.small = nil, nil
	b.r, b.w, b.scan = 0, 0, 0
}

// Buffered is the number of bytes that can be read without reading src.
func (b *Reader) Buffered() int { return b.w - b.r }

// Peek returns the buffered bytes without consuming them.
func (b *Reader) Peek() []byte { return b.buf[b.r:b.w] }

// Fill reads from src once when nothing is buffered: it waits for the
// first byte of the next message.
func (b *Reader) Fill() error {
	if b.w > b.r {
		return nil
	}
	b.r, b.w, b.scan = 0, 0, 0
	return b.fill(len(b.buf))
}

// Space returns free buffer space for a caller that reads from the source
// itself (a raw socket read); Added records what it put there.
func (b *Reader) Space() []byte {
	if b.r == b.w {
		b.r, b.w, b.scan = 0, 0, 0
	} else if b.w == len(b.buf) && b.r > 0 {
		n := copy(b.buf, b.buf[b.r:b.w])
		b.r, b.w = 0, n
	}
	return b.buf[b.w:]
}

// Added records n bytes put into Space.
func (b *Reader) Added(n int) { b.w += n }

// Discard consumes n buffered bytes.
func (b *Reader) Discard(n int) {
	b.r += n
	b.scan = max(0, b.scan-n)
	if b.r == b.w {
		b.r, b.w, b.scan = 0, 0, 0
	}
}

// fill reads once from src into free space, compacting or growing the
// buffer first when it is full and limit allows (limit is the largest
// buffered amount wanted).
func (b *Reader) fill(limit int) error {
	if b.r > 0 && b.w == len(b.buf) {
		n := copy(b.buf, b.buf[b.r:b.w])
		b.r, b.w = 0, n
	}
	if b.w == len(b.buf) {
		if len(b.buf) >= limit {
			return errBufferFull
		}
		nb := make([]byte, min(max(2*len(b.buf), 4096), limit))
		b.w = copy(nb, b.buf[b.r:b.w])
		b.r = 0
		b.buf = nb
	}
	n, err := b.src.Read(b.buf[b.w:])
	b.w += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// Buffer reads until n bytes are buffered, growing the buffer to hold
// them. Buffered bytes may move: slices from Peek or ReadHead are invalid
// afterwards (take them again from Peek).
func (b *Reader) Buffer(n int) error {
	for b.w-b.r < n {
		if err := b.fill(n); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// shrink returns to the small buffer once a large head has been consumed.
func (b *Reader) shrink() {
	if len(b.buf) == len(b.small) || b.w-b.r > len(b.small) {
		return
	}
	n := copy(b.small, b.buf[b.r:b.w])
	b.buf, b.r, b.w = b.small, 0, n
}

// ReadHead reads a message head: everything up to and including the blank
// line that ends it. The slice is valid until the next call on b; the
// caller consumes it with Discard(len(head)) once parsed. max bounds the
// head's size (ErrHeadTooLarge beyond it). A bare LF anywhere in the head is
// an error: RFC 9112 lets a recipient accept one, peerd does not, since
// peers that disagree about line ends are how requests are smuggled.
//
// On a read error the bytes so far stay buffered and the error is returned;
// io.EOF means the connection closed with nothing buffered, and
// io.ErrUnexpectedEOF that it closed inside a head.
func (b *Reader) ReadHead(max int) ([]byte, error) {
	for {
		data := b.buf[b.r:b.w]
		if i, err := scanHead(data, b.scan); err != nil {
			return nil, err
		} else if i > 0 {
			if i > max {
				return nil, ErrHeadTooLarge
			}
			b.scan = 0
			return data[:i], nil
		}
		// Keep the last three bytes unscanned: they may start the CRLFCRLF.
		b.scan = len(data) - min(len(data), 3)
		if len(data) >= max {
			return nil, ErrHeadTooLarge
		}
		if err := b.fill(max); err != nil {
			if err == errBufferFull {
				return nil, ErrHeadTooLarge
			}
			if err == io.EOF && b.Buffered() > 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

// HeadBuffered reports whether ReadHead would return without reading: a
// whole head (or a reason to refuse one) is buffered already.
func (b *Reader) HeadBuffered(max int) bool {
	data := b.buf[b.r:b.w]
	i, err := scanHead(data, b.scan)
	if err != nil || i > 0 || len(data) >= max {
		return true
	}
	b.scan = len(data) - min(len(data), 3)
	return false
}

// Release consumes a head returned by ReadHead and shrinks the buffer back
// after a large one. The head's slices are invalid afterwards.
func (b *Reader) Release(head []byte) {
	b.Discard(len(head))
	b.shrink()
}

// scanHead finds the end of a head in data, checking line ends from
// offset from: it returns the length through CRLFCRLF, 0 if the head is
// not complete, or an error for a bare LF.
func scanHead(data []byte, from int) (int, error) {
	for i := from; i < len(data); {
		j := bytes.IndexByte(data[i:], '\n')
		if j < 0 {
			return 0, nil
		}
		i += j
		if i == 0 || data[i-1] != '\r' {
			return 0, ErrBareLF
		}
		if i >= 3 && data[i-2] == '\n' && data[i-3] == '\r' {
			return i + 1, nil
		}
		if i == 1 {
			// The head starts with an empty line: no request or status
			// line precedes it.
			return 0, ErrEmptyLine
		}
		i++
	}
	return 0, nil
}

// Read reads body bytes: buffered ones first, then straight from src.
func (b *Reader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if b.r == b.w {
		if len(p) >= len(b.small) {
			// Large reads bypass the buffer.
			return b.src.Read(p)
		}
		b.r, b.w, b.scan = 0, 0, 0
		if err := b.fill(len(b.buf)); err != nil {
			return 0, err
		}
	}
	n := copy(p, b.buf[b.r:b.w])
	b.Discard(n)
	return n, nil
}

// readLine returns the next CRLF-terminated line without its CRLF, valid
// until the next call on b. max bounds the line's length.
func (b *Reader) readLine(max int) ([]byte, error) {
	for {
		data := b.buf[b.r:b.w]
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			if i == 0 || data[i-1] != '\r' {
				return nil, ErrBareLF
			}
			if i-1 > max {
				return nil, ErrLineTooLong
			}
			line := data[:i-1]
			b.Discard(i + 1)
			return line, nil
		}
		if len(data) > max+1 {
			return nil, ErrLineTooLong
		}
		if err := b.fill(max + 2); err != nil {
			if err == errBufferFull {
				return nil, ErrLineTooLong
			}
			if err == io.EOF {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}
