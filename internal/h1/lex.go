package h1

// This file holds the lexical helpers of the parser: Connection options,
// tokens, case-insensitive compares, optional whitespace, digits and the
// character tables.

import (
	"bytes"
)

// connectionTokens appends the tokens of a Connection value.
func connectionTokens(v []byte, dst [][]byte) [][]byte {
	for len(v) > 0 {
		var tok []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			tok, v = v[:i], v[i+1:]
		} else {
			tok, v = v, nil
		}
		if tok = TrimOWS(tok); len(tok) > 0 {
			dst = append(dst, tok)
		}
	}
	return dst
}

// connectionOptions removes close, keep-alive and upgrade from tokens and
// reports whether the connection persists and whether upgrade was named.
func connectionOptions(tokens [][]byte, minor int) (rest [][]byte, keepAlive, upgrade bool) {
	closeTok, keep := false, false
	rest = tokens[:0]
	for _, t := range tokens {
		switch {
		case EqualFold(t, "close"):
			closeTok = true
		case EqualFold(t, "keep-alive"):
			keep = true
		case EqualFold(t, "upgrade"):
			upgrade = true
		default:
			rest = append(rest, t)
		}
	}
	if minor == 0 {
		return rest, keep && !closeTok, upgrade
	}
	return rest, !closeTok, upgrade
}

// badTrailer reports whether a Trailer value names a field that must not
// be sent as a trailer (as net/http refuses).
func badTrailer(v []byte) bool {
	var toks [16][]byte
	for _, t := range connectionTokens(v, toks[:0]) {
		if EqualFold(t, "Transfer-Encoding") || EqualFold(t, "Trailer") || EqualFold(t, "Content-Length") {
			return true
		}
	}
	return false
}

// TrimOWS trims optional whitespace (spaces and tabs, RFC 9110 5.6.3)
// from both ends of b.
func TrimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// EqualFold is bytes.EqualFold against a string, for ASCII, without
// converting either.
func EqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c, d := b[i], s[i]
		if c == d {
			continue
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHex(c byte) bool {
	return isDigit(c) || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F')
}

// IsTchar reports a token character (RFC 9110 5.6.2).
func IsTchar(c byte) bool { return tchar[c] }

// IsToken reports whether s is a token (RFC 9110 5.6.2), e.g. a field name.
func IsToken(s string) bool { return isToken([]byte(s)) }

func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !tchar[c] {
			return false
		}
	}
	return true
}

func isScheme(b []byte) bool {
	for i, c := range b {
		alpha := ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
		if !alpha && (i == 0 || !(isDigit(c) || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return len(b) > 0
}

// Character tables.
var (
	tchar     [256]bool // RFC 9110 5.6.2 token characters
	valueByte [256]bool // field-value bytes: HTAB, SP, VCHAR, obs-text
	pathChar  [256]bool // RFC 3986 pchar and "/" "?", less "%" (checked apart)
	hostChar  [256]bool // reg-name and IPv4 characters peerd accepts
)

func init() {
	for c := 0; c < 256; c++ {
		b := byte(c)
		alnum := isDigit(b) || ('a' <= b && b <= 'z') || ('A' <= b && b <= 'Z')
		tchar[c] = alnum || bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), b) >= 0
		valueByte[c] = c == '\t' || (c >= 0x20 && c != 0x7f)
		pathChar[c] = alnum || bytes.IndexByte([]byte("-._~!$&'()*+,;=:@/?"), b) >= 0
		hostChar[c] = alnum || b == '-' || b == '.' || b == '_'
	}
}
