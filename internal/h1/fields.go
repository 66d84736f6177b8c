package h1

// This file holds field kinds: the names peerd acts on, classified once.

// Kind names the header fields peerd acts on. A field's kind is found once,
// when its head is parsed, so the loops that frame, strip and rewrite
// messages compare a byte instead of a case-insensitive name each.
type Kind uint8

const (
	Other Kind = iota
	Host
	ContentLength
	TransferEncoding
	Connection
	KeepAlive
	ProxyConnection
	TE
	Trailer
	Upgrade
	Expect
	ProxyAuthorization
	ProxyAuthenticate
	Via
	XForwardedFor
	CacheControl
	MaxForwards
	ContentType
	// The fields the cache reads (RFC 9111).
	Age
	Date
	Expires
	ETag
	LastModified
	Vary
	Pragma
	Authorization
	Location
	ContentLocation
	ContentLanguage
	ContentRange
	Range
	IfNoneMatch
	IfModifiedSince
	IfRange
	IfMatch
	IfUnmodifiedSince
	ProxyAuthenticationInfo
	// Set-Cookie and Set-Cookie2 belong to one client: a shared cache never
	// stores or replays them.
	SetCookie
	SetCookie2
	kinds
)

var kindNames = [kinds]string{"", "Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive",
	"Proxy-Connection", "TE", "Trailer", "Upgrade", "Expect", "Proxy-Authorization", "Proxy-Authenticate",
	"Via", "X-Forwarded-For", "Cache-Control", "Max-Forwards", "Content-Type",
	"Age", "Date", "Expires", "ETag", "Last-Modified", "Vary", "Pragma", "Authorization", "Location",
	"Content-Location", "Content-Language", "Content-Range", "Range", "If-None-Match", "If-Modified-Since",
	"If-Range", "If-Match", "If-Unmodified-Since", "Proxy-Authentication-Info", "Set-Cookie", "Set-Cookie2"}

// kindTable finds a kind by its name's length and folded first and last
// bytes, which no two kinds share: one load from a 256-byte table, and one
// comparison of the whole name to confirm it (a lookup per field of every
// head). init checks that no two kinds collide.
var kindTable [256]Kind

func kindSlot(n int, first, last byte) uint8 {
	return uint8(n*5 + int(first|0x20)*15 + int(last|0x20))
}

func init() {
	for k := Kind(1); k < kinds; k++ {
		n := kindNames[k]
		s := kindSlot(len(n), n[0], n[len(n)-1])
		if kindTable[s] != Other {
			panic("h1: " + n + " and " + kindNames[kindTable[s]] + " share a kind slot")
		}
		kindTable[s] = k
	}
}

// KindOf classifies a field name as the parser does.
func KindOf(name []byte) Kind { return kindOf(name) }

// kindOf classifies a field name.
func kindOf(name []byte) Kind {
	if len(name) == 0 {
		return Other
	}
	k := kindTable[kindSlot(len(name), name[0], name[len(name)-1])]
	if k != Other && EqualFold(name, kindNames[k]) {
		return k
	}
	return Other
}

// HopByHop reports whether the field is hop-by-hop (RFC 9110 7.6.1) for
// a message whose Connection options are tokens.
func (f Field) HopByHop(tokens [][]byte) bool {
	switch f.Kind {
	case Connection, KeepAlive, ProxyConnection, TE, TransferEncoding, Upgrade:
		return true
	}
	for _, t := range tokens {
		if len(t) == len(f.Name) && EqualFold(f.Name, string(t)) {
			return true
		}
	}
	return false
}
