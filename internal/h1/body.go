package h1

// This file holds reading a message body: Content-Length, chunked (with
// trailers) and read-to-close.

import (
	"bufio"
	"io"
)

// BodyReader reads one message body from a Reader, by its framing. It is
// reused from message to message (Reset); it allocates nothing except to
// keep a trailer section.
type BodyReader struct {
	r    *Reader
	kind Body
	n    int64 // LengthBody: bytes left; ChunkedBody: bytes left in chunk
	// chunked state
	inChunk    bool // reading chunk data
	excess     int64
	maxTrailer int
	done       bool
	err        error
	// Trailer holds the trailer fields of a chunked body once Read has
	// returned io.EOF; they point into trailerBuf.
	Trailer    []Field
	trailerBuf []byte
	// Read counts the body bytes returned so far.
	Count int64
}

// Reset prepares b to read a body of the given kind (n for LengthBody).
// maxTrailer bounds a chunked body's trailer section.
func (b *BodyReader) Reset(r *Reader, kind Body, n int64, maxTrailer int) {
	*b = BodyReader{r: r, kind: kind, n: n, maxTrailer: maxTrailer,
		Trailer: b.Trailer[:0], trailerBuf: b.trailerBuf[:0]}
	if kind == NoBody || (kind == LengthBody && n == 0) {
		b.done = true
	}
}

// Done reports whether the body was read to its end (io.EOF was returned).
func (b *BodyReader) Done() bool { return b.done && b.err == nil }

// Read reads body bytes; io.EOF marks the end of the body. After an error
// other than io.EOF the connection's framing is lost.
func (b *BodyReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.done {
		return 0, io.EOF
	}
	var n int
	var err error
	switch b.kind {
	case LengthBody:
		if int64(len(p)) > b.n {
			p = p[:b.n]
		}
		n, err = b.r.Read(p)
		b.n -= int64(n)
		switch {
		case b.n == 0:
			b.done, err = true, nil
		case err == io.EOF:
			err = io.ErrUnexpectedEOF
		}
	case CloseBody:
		n, err = b.r.Read(p)
		if err == io.EOF {
			b.done = true
		}
	case ChunkedBody:
		n, err = b.readChunked(p)
	}
	b.Count += int64(n)
	if err != nil && err != io.EOF {
		b.err = err
	}
	if b.done && err == nil && n == 0 {
		err = io.EOF
	}
	return n, err
}

// maxChunkLine is net/http's limit for a chunk-size line.
const maxChunkLine = 4095

func (b *BodyReader) readChunked(p []byte) (int, error) {
	for {
		if b.inChunk {
			if b.n == 0 {
				line, err := b.r.readLine(0)
				if err != nil {
					if err == ErrLineTooLong || err == ErrBareLF {
						return 0, ErrChunkEnd
					}
					return 0, err
				}
				_ = line
				b.inChunk = false
				continue
			}
			if int64(len(p)) > b.n {
				p = p[:b.n]
			}
			n, err := b.r.Read(p)
			b.n -= int64(n)
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return n, err
		}
		line, err := b.r.readLine(maxChunkLine)
		if err != nil {
			if err == ErrLineTooLong || err == ErrBareLF {
				return 0, ErrChunkSize
			}
			return 0, err
		}
		size, ok := parseChunkSize(line)
		if !ok {
			return 0, ErrChunkSize
		}
		// net/http's rule against a sender that buries a little data in
		// much framing: 16 bytes of overhead per chunk plus twice its data.
		b.excess += int64(len(line)) + 2 - 16 - 2*size
		b.excess = max(b.excess, 0)
		if b.excess > 16<<10 {
			return 0, ErrChunkOverhead
		}
		if size == 0 {
			if err := b.readTrailer(); err != nil {
				return 0, err
			}
			b.done = true
			return 0, io.EOF
		}
		b.n, b.inChunk = size, true
	}
}

// parseChunkSize parses chunk-size [ws] [";" chunk-ext]: at most 15 hex
// digits, trailing whitespace only at the end, extensions of field-value
// bytes (they are discarded, as every proxy does).
func parseChunkSize(line []byte) (int64, bool) {
	var n int64
	i := 0
	for ; i < len(line) && isHex(line[i]); i++ {
		if i == 15 {
			return 0, false
		}
		n = n<<4 | int64(unhex(line[i]))
	}
	if i == 0 {
		return 0, false
	}
	rest := line[i:]
	if len(rest) > 0 && rest[0] == ';' {
		for _, c := range rest {
			if !valueByte[c] {
				return 0, false
			}
		}
		return n, true
	}
	for _, c := range rest {
		if c != ' ' && c != '\t' {
			return 0, false
		}
	}
	return n, true
}

func unhex(c byte) byte {
	switch {
	case isDigit(c):
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// readTrailer reads the trailer section after the last chunk into
// trailerBuf and parses it.
func (b *BodyReader) readTrailer() error {
	for {
		line, err := b.r.readLine(b.maxTrailer)
		if err != nil {
			if err == ErrLineTooLong {
				return ErrTrailerTooLarge
			}
			return err
		}
		if len(line) == 0 {
			break
		}
		if len(b.trailerBuf)+len(line)+2 > b.maxTrailer {
			return ErrTrailerTooLarge
		}
		b.trailerBuf = append(append(b.trailerBuf, line...), '\r', '\n')
	}
	if len(b.trailerBuf) == 0 {
		return nil
	}
	b.trailerBuf = append(b.trailerBuf, '\r', '\n')
	f, err := parseFields(b.trailerBuf, b.Trailer[:0])
	b.Trailer = f
	return err
}

// Writers.

// WriteChunk writes p as one chunk.
func WriteChunk(w *bufio.Writer, p []byte) error {
	if len(p) == 0 {
		return nil
	}
	var hex [16]byte
	i := len(hex)
	for n := len(p); n > 0 || i == len(hex); n >>= 4 {
		i--
		hex[i] = "0123456789abcdef"[n&15]
	}
	w.Write(hex[i:])
	w.WriteString("\r\n")
	w.Write(p)
	_, err := w.WriteString("\r\n")
	return err
}

// WriteLastChunk ends a chunked body, with trailer fields.
func WriteLastChunk(w *bufio.Writer, trailer []Field) error {
	w.WriteString("0\r\n")
	for _, f := range trailer {
		w.Write(f.Name)
		w.WriteString(": ")
		w.Write(f.Value)
		w.WriteString("\r\n")
	}
	_, err := w.WriteString("\r\n")
	return err
}

// Left is what a Content-Length body still has to come (0 for other
// kinds): the bytes a caller may move without Read.
func (b *BodyReader) Left() int64 {
	if b.kind != LengthBody || b.err != nil {
		return 0
	}
	return b.n
}

// Moved accounts for n body bytes that went from the connection to their
// destination without passing through Read (splice(2)); the body is done
// when none is left. It is for Content-Length bodies with nothing
// buffered in the Reader.
func (b *BodyReader) Moved(n int64) {
	b.n -= n
	b.Count += n
	if b.n == 0 {
		b.done = true
	}
}
