package h1

// This file holds response heads: parsing them (RFC 9112), strictly, and
// how their body is framed.

import "bytes"

// Response is a parsed response head; like Request, its slices point into
// the head and it is reused.
type Response struct {
	Minor  int
	Status int
	Reason []byte
	Fields []Field
	Framing
}

// Get returns the value of the first field named name, or nil.
func (r *Response) Get(name string) []byte { return get(r.Fields, name) }

// Body says how a message body is delimited.
type Body uint8

const (
	NoBody     Body = iota
	LengthBody      // ContentLength bytes
	ChunkedBody
	CloseBody // until the connection closes
)

// BodyFor says how this response's body is delimited, given whether it
// answers a HEAD request (RFC 9112 6.3).
func (r *Response) BodyFor(head bool) Body {
	switch {
	case head, r.Status < 200, r.Status == 204, r.Status == 304:
		return NoBody
	case r.Chunked:
		return ChunkedBody
	case r.ContentLength == 0:
		return NoBody
	case r.ContentLength > 0:
		return LengthBody
	}
	return CloseBody
}

// ParseResponse parses a response head as returned by Reader.ReadHead.
func ParseResponse(head []byte, r *Response) error {
	fr := r.Framing
	fr.reset()
	*r = Response{Fields: r.Fields[:0], Framing: fr}
	line, rest, err := firstLine(head)
	if err != nil {
		return err
	}
	switch {
	case bytes.HasPrefix(line, []byte("HTTP/1.1 ")):
		r.Minor = 1
	case bytes.HasPrefix(line, []byte("HTTP/1.0 ")):
		r.Minor = 0
	default:
		return ErrStatusLine
	}
	line = line[9:]
	if len(line) < 3 || !isDigit(line[0]) || !isDigit(line[1]) || !isDigit(line[2]) || (len(line) > 3 && line[3] != ' ') {
		return ErrStatusLine
	}
	r.Status = int(line[0]-'0')*100 + int(line[1]-'0')*10 + int(line[2]-'0')
	if r.Status < 100 || r.Status > 599 {
		return ErrStatusLine
	}
	if len(line) > 4 {
		r.Reason = line[4:]
		for _, c := range r.Reason {
			if !valueByte[c] {
				return ErrStatusLine
			}
		}
	}
	f, err := parseFields(rest, r.Fields)
	r.Fields = f
	if err != nil {
		return err
	}
	return r.Framing.decode(r.Fields, r.Minor)
}

// Shared pieces.
