package h1

// This file holds parsing request and response heads (RFC 9112), strictly.

import (
	"bytes"
	"net/netip"
	"net/url"
)

// Field is one header field line, as slices of the message head: the name
// as sent and the value with surrounding whitespace removed.
type Field struct {
	Name, Value []byte
	// Kind is the field's kind among those peerd acts on (Other for the
	// rest), found when the head was parsed.
	Kind Kind
}

// Is reports whether the field's name is name (ASCII case-insensitive).
func (f Field) Is(name string) bool { return EqualFold(f.Name, name) }

// MaxFields bounds the header fields of one head (431 beyond it).
const MaxFields = 512

// TargetForm is the form of a request target (RFC 9112 3.2).
type TargetForm uint8

const (
	OriginForm    TargetForm = iota // /path?query
	AbsoluteForm                    // http://host:port/path?query
	AuthorityForm                   // host:port, for CONNECT
	AsteriskForm                    // *, for OPTIONS
)

// Request is a parsed request head. Its slices point into the head passed
// to ParseRequest and are valid only as long as it is. A Request is reused
// from message to message: ParseRequest resets it.
type Request struct {
	Method []byte
	Target []byte
	// Minor is the HTTP/1 minor version, 0 or 1.
	Minor  int
	Fields []Field

	Form TargetForm
	// For absolute and authority forms: the scheme (absolute only, as
	// sent), the host (IPv6 without brackets) and the port ("" when absent).
	Scheme, Host, Port []byte
	// HostBracketed says Host is an IPv6 literal.
	HostBracketed bool
	// PathQuery is an absolute-form target's path and query; empty when
	// the URI has neither (it then means "/").
	PathQuery []byte

	Framing
	Expect100 bool
}

// Framing is what a head says about its body and its connection.
type Framing struct {
	// ContentLength is the body length, -1 when the head has none.
	ContentLength int64
	Chunked       bool
	// KeepAlive: the connection persists after this message (RFC 9112 9.3).
	KeepAlive bool
	// Upgrade is the Upgrade field's value when Connection lists upgrade.
	Upgrade []byte
	// ConnTokens are the Connection options other than close, keep-alive
	// and upgrade: names of fields that are hop-by-hop for this message.
	ConnTokens [][]byte
}

func (f *Framing) reset() { *f = Framing{ContentLength: -1, ConnTokens: f.ConnTokens[:0]} }

// decode reads the framing fields (RFC 9112 6): one Content-Length (a
// repeat must repeat its text), at most one Transfer-Encoding and only
// chunked, never both, none in HTTP/1.0, no framing field named by
// Trailer; and the Connection options.
func (f *Framing) decode(fields []Field, minor int) error {
	te := 0
	trailer := false
	var cl []byte
	for _, fl := range fields {
		switch fl.Kind {
		case ContentLength:
			// "03" beside "3" is refused, as net/http refuses it.
			n, ok := parseLength(fl.Value)
			if !ok || (cl != nil && !bytes.Equal(cl, fl.Value)) {
				return ErrContentLength
			}
			f.ContentLength, cl = n, fl.Value
		case TransferEncoding:
			te++
			if !EqualFold(fl.Value, "chunked") || te > 1 {
				return ErrTransferEncoding
			}
		case Connection:
			f.ConnTokens = connectionTokens(fl.Value, f.ConnTokens)
		case Trailer:
			trailer = trailer || badTrailer(fl.Value)
		}
	}
	if te > 0 {
		if minor == 0 {
			return ErrTEOnHTTP10
		}
		if f.ContentLength >= 0 {
			return ErrCLAndTE
		}
		f.Chunked = true
		if trailer {
			return ErrTrailerField
		}
	}
	var up bool
	f.ConnTokens, f.KeepAlive, up = connectionOptions(f.ConnTokens, minor)
	if up {
		f.Upgrade = get(fields, "Upgrade")
	}
	return nil
}

// IsMethod reports whether the request's method is m (case-sensitive, as
// methods are).
func (r *Request) IsMethod(m string) bool { return string(r.Method) == m }

// Get returns the value of the first field named name, or nil.
func (r *Request) Get(name string) []byte { return get(r.Fields, name) }

func (r *Request) reset() {
	f := r.Framing
	f.reset()
	*r = Request{Fields: r.Fields[:0], Framing: f}
}

// ParseRequest parses a request head as returned by Reader.ReadHead.
func ParseRequest(head []byte, r *Request) error {
	r.reset()
	line, rest, err := firstLine(head)
	if err != nil {
		return err
	}
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 {
		return ErrRequestLine
	}
	r.Method = line[:sp]
	if !isToken(r.Method) {
		return ErrMethod
	}
	line = line[sp+1:]
	sp = bytes.IndexByte(line, ' ')
	if sp <= 0 {
		return ErrRequestLine
	}
	r.Target, line = line[:sp], line[sp+1:]
	switch string(line) {
	case "HTTP/1.1":
		r.Minor = 1
	case "HTTP/1.0":
		r.Minor = 0
	default:
		if len(line) == 8 && bytes.HasPrefix(line, []byte("HTTP/")) && line[6] == '.' && isDigit(line[5]) && isDigit(line[7]) {
			return ErrVersion
		}
		return ErrRequestLine
	}
	if err := r.parseTarget(); err != nil {
		return err
	}
	f, err := parseFields(rest, r.Fields)
	r.Fields = f
	if err != nil {
		return err
	}
	return r.framing()
}

func (r *Request) parseTarget() error {
	t := r.Target
	switch {
	case r.IsMethod("CONNECT"):
		r.Form = AuthorityForm
		host, port, bracketed, ok := parseAuthority(t, true)
		if !ok {
			return ErrTarget
		}
		r.Host, r.Port, r.HostBracketed = host, port, bracketed
		return nil
	case len(t) == 1 && t[0] == '*':
		r.Form = AsteriskForm
		return nil
	case t[0] == '/':
		r.Form = OriginForm
		return checkPathQuery(t, t)
	}
	scheme, host, port, pq, bracketed, ok := splitAbsolute(t)
	if !ok {
		return ErrTarget
	}
	r.Form = AbsoluteForm
	r.Scheme, r.Host, r.Port, r.HostBracketed, r.PathQuery = scheme, host, port, bracketed, pq
	return checkPathQuery(r.PathQuery, t)
}

// SplitAbsolute splits an absolute URI ("http://host:port/path?q", as an
// ICP query carries it) into its parts, without allocating; ok is false
// for anything a request target of that form would be refused for.
func SplitAbsolute(u []byte) (scheme, host, port, pathQuery []byte, ok bool) {
	scheme, host, port, pathQuery, _, ok = splitAbsolute(u)
	if ok && checkPathQuery(pathQuery, u) != nil {
		return nil, nil, nil, nil, false
	}
	return scheme, host, port, pathQuery, ok
}

func splitAbsolute(t []byte) (scheme, host, port, pathQuery []byte, bracketed, ok bool) {
	colon := bytes.IndexByte(t, ':')
	if colon <= 0 || !isScheme(t[:colon]) || !bytes.HasPrefix(t[colon:], []byte("://")) {
		return nil, nil, nil, nil, false, false
	}
	auth := t[colon+3:]
	end := bytes.IndexAny(auth, "/?")
	if end < 0 {
		end = len(auth)
	}
	host, port, bracketed, ok = parseAuthority(auth[:end], false)
	if !ok {
		return nil, nil, nil, nil, false, false
	}
	return t[:colon], host, port, auth[end:], bracketed, true
}

// checkPathQuery validates a path and query. The common characters are
// checked here; a target with anything else (raw UTF-8, "|", "{", ...)
// must also satisfy net/url, so peerd is never more lenient than Go.
func checkPathQuery(pq, target []byte) error {
	slow := false
	for i := 0; i < len(pq); i++ {
		c := pq[i]
		switch {
		case c <= ' ' || c == 0x7f || c == '#':
			return ErrTarget
		case c == '%':
			if i+2 >= len(pq) || !isHex(pq[i+1]) || !isHex(pq[i+2]) {
				return ErrTarget
			}
			i += 2
		case !pathChar[c]:
			slow = true
		}
	}
	if slow {
		if _, err := url.ParseRequestURI(string(target)); err != nil {
			return ErrTarget
		}
	}
	return nil
}

// parseAuthority splits host[:port]; needPort for CONNECT. Userinfo is
// refused (RFC 9110 4.2.4: a sender must not generate it).
func parseAuthority(a []byte, needPort bool) (host, port []byte, bracketed, ok bool) {
	if len(a) == 0 {
		return nil, nil, false, false
	}
	rest := a
	if a[0] == '[' {
		end := bytes.IndexByte(a, ']')
		if end < 0 {
			return nil, nil, false, false
		}
		host, rest, bracketed = a[1:end], a[end+1:], true
		ip, err := netip.ParseAddr(string(host))
		if err != nil || !ip.Is6() || ip.Zone() != "" {
			return nil, nil, false, false
		}
	} else {
		end := bytes.IndexByte(a, ':')
		if end < 0 {
			end = len(a)
		}
		host, rest = a[:end], a[end:]
		if len(host) == 0 {
			return nil, nil, false, false
		}
		for _, c := range host {
			if !hostChar[c] {
				return nil, nil, false, false
			}
		}
	}
	if len(rest) > 0 {
		if rest[0] != ':' || !validPort(rest[1:]) {
			return nil, nil, false, false
		}
		port = rest[1:]
	} else if needPort {
		return nil, nil, false, false
	}
	return host, port, bracketed, true
}

func validPort(p []byte) bool {
	if len(p) == 0 || len(p) > 5 {
		return false
	}
	n := 0
	for _, c := range p {
		if !isDigit(c) {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n >= 1 && n <= 65535
}

// PortNumber returns a validated port's value.
func PortNumber(p []byte) int {
	n := 0
	for _, c := range p {
		n = n*10 + int(c-'0')
	}
	return n
}

// framing derives body framing and connection facts from the fields.
func (r *Request) framing() error {
	hosts := 0
	for _, f := range r.Fields {
		switch f.Kind {
		case Host:
			hosts++
			if len(f.Value) > 0 {
				if _, _, _, ok := parseAuthority(f.Value, false); !ok {
					return ErrHost
				}
			}
		case Expect:
			if !EqualFold(f.Value, "100-continue") {
				return ErrExpect
			}
			r.Expect100 = true
		}
	}
	if err := r.Framing.decode(r.Fields, r.Minor); err != nil {
		return err
	}
	// RFC 9112 3.2: an HTTP/1.1 request has exactly one Host (CONNECT is
	// spared: its target is the authority, and not every client sends it).
	if hosts > 1 || (hosts == 0 && r.Minor == 1 && r.Form != AuthorityForm) {
		return ErrHost
	}
	return nil
}

// Status line and response head.

// firstLine splits the start line from the field lines (head ends CRLFCRLF
// and has no bare LF, as ReadHead guarantees).
func firstLine(head []byte) (line, rest []byte, err error) {
	i := bytes.IndexByte(head, '\n')
	if i < 1 || head[i-1] != '\r' {
		return nil, nil, ErrBareLF
	}
	line = head[:i-1]
	for _, c := range line {
		if c < ' ' || c == 0x7f {
			return nil, nil, ErrRequestLine
		}
	}
	return line, head[i+1:], nil
}

// parseFields parses field lines up to the blank line, appending to dst.
func parseFields(b []byte, dst []Field) ([]Field, error) {
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 1 || b[i-1] != '\r' {
			return dst, ErrBareLF
		}
		line := b[:i-1]
		b = b[i+1:]
		if len(line) == 0 {
			return dst, nil
		}
		if line[0] == ' ' || line[0] == '\t' {
			return dst, ErrObsFold
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return dst, ErrFieldLine
		}
		name := line[:colon]
		if !isToken(name) {
			return dst, ErrFieldName
		}
		v := line[colon+1:]
		for _, c := range v {
			if !valueByte[c] {
				return dst, ErrFieldValue
			}
		}
		if len(dst) >= MaxFields {
			return dst, ErrTooManyFields
		}
		dst = append(dst, Field{Name: name, Value: TrimOWS(v), Kind: kindOf(name)})
	}
}

func get(fields []Field, name string) []byte {
	k := kindOf([]byte(name))
	for _, f := range fields {
		if f.Kind == k && (k != Other || f.Is(name)) {
			return f.Value
		}
	}
	return nil
}

// parseLength parses a Content-Length value: 1*DIGIT, at most 18 digits.
func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
