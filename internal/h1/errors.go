// Package h1 is peerd's HTTP/1.1 framing: message heads parsed in place
// (no allocation per message), bodies delimited by Content-Length, chunked
// coding with trailers or connection close, and the writers that frame
// them again. It does no I/O policy of its own: no timeouts, no pools, no
// proxy semantics — forwarding owns those.
//
// It is strict where RFC 9112 leaves a recipient a choice, because a proxy
// that is more lenient than the next hop is how requests get smuggled: a
// bare LF, obs-fold, Content-Length beside Transfer-Encoding, a transfer
// coding other than chunked, HTTP versions other than 1.0 and 1.1 and a
// malformed chunk are errors. Whatever net/http's parser rejects, this one
// rejects too; the fuzz tests hold it to that, with net/http as the oracle.
package h1

// Error is a framing error. The messages are constants so that refusing a
// malformed message allocates nothing.
type Error string

func (e Error) Error() string { return string(e) }

// The framing errors. Status says which HTTP status a server answers a
// request with for each.
const (
	ErrHeadTooLarge     Error = "message head too large"
	ErrBareLF           Error = "bare LF line ending"
	ErrEmptyLine        Error = "empty line before the start line"
	ErrRequestLine      Error = "malformed request line"
	ErrMethod           Error = "invalid method"
	ErrTarget           Error = "invalid request target"
	ErrVersion          Error = "unsupported HTTP version"
	ErrStatusLine       Error = "malformed status line"
	ErrFieldLine        Error = "malformed header field line"
	ErrObsFold          Error = "obsolete line folding"
	ErrFieldName        Error = "invalid header field name"
	ErrFieldValue       Error = "invalid header field value"
	ErrTooManyFields    Error = "too many header fields"
	ErrHost             Error = "missing, repeated or invalid Host"
	ErrContentLength    Error = "invalid or conflicting Content-Length"
	ErrCLAndTE          Error = "both Content-Length and Transfer-Encoding"
	ErrTransferEncoding Error = "unsupported Transfer-Encoding"
	ErrTEOnHTTP10       Error = "Transfer-Encoding in an HTTP/1.0 message"
	ErrTrailerField     Error = "forbidden field named in Trailer"
	ErrExpect           Error = "unsupported expectation"
	ErrChunkSize        Error = "malformed chunk size"
	ErrChunkEnd         Error = "malformed chunk end"
	ErrChunkOverhead    Error = "chunked body with too much non-data"
	ErrLineTooLong      Error = "line too long"
	ErrTrailerTooLarge  Error = "trailer section too large"
	errBufferFull       Error = "buffer full"
)

// Status is the HTTP status a server answers a request refused with err.
func Status(err error) int {
	switch err {
	case ErrHeadTooLarge, ErrTooManyFields:
		return 431
	case ErrTransferEncoding:
		return 501
	case ErrExpect:
		return 417
	}
	return 400
}
