package nexthop

// This file holds the Proxy-Status parser: a list of items with
// parameters (RFC 8941), of which the last member's error type and
// no-next-hop parameter are read. Malformed input reads as no error.

import "github.com/peerd/peerd/internal/h1"

// NoNextHopParam is the Proxy-Status parameter (a boolean) by which a
// peerd says it has no usable next hop for its default route.
const NoNextHopParam = "no-next-hop"

// memberParams are what is read of a member's parameters.
type memberParams struct {
	errType   string
	hasError  bool
	noNextHop bool
}

// LastError returns the error parameter of the last member of a
// Proxy-Status list, and whether it has one (a malformed list has none).
func LastError(v []byte) (string, bool) {
	p := lastMember(v)
	return p.errType, p.hasError
}

// lastMember parses a Proxy-Status list and returns its last member's
// parameters; malformed input yields none.
func lastMember(v []byte) memberParams {
	var p memberParams
	i := 0
	for i < len(v) {
		for i < len(v) && (v[i] == ' ' || v[i] == '\t') {
			i++
		}
		// The member's item: a token or a string.
		var ok bool
		if i, ok = skipBareItem(v, i); !ok {
			return memberParams{}
		}
		p = memberParams{}
		// Its parameters.
		for {
			for i < len(v) && v[i] == ' ' {
				i++
			}
			if i >= len(v) || v[i] != ';' {
				break
			}
			i++
			for i < len(v) && v[i] == ' ' {
				i++
			}
			ks := i
			for i < len(v) && (v[i] >= 'a' && v[i] <= 'z' || v[i] >= '0' && v[i] <= '9' || v[i] == '_' || v[i] == '-' || v[i] == '.' || v[i] == '*') {
				i++
			}
			key := v[ks:i]
			if len(key) == 0 {
				return memberParams{}
			}
			if i < len(v) && v[i] == '=' {
				i++
				vs := i
				if i, ok = skipBareItem(v, i); !ok {
					return memberParams{}
				}
				switch string(key) {
				case "error":
					p.errType, p.hasError = string(v[vs:i]), true
				case NoNextHopParam:
					p.noNextHop = string(v[vs:i]) == "?1"
				}
			} else if string(key) == NoNextHopParam {
				p.noNextHop = true // a bare key is true
			}
		}
		for i < len(v) && (v[i] == ' ' || v[i] == '\t') {
			i++
		}
		if i < len(v) {
			if v[i] != ',' {
				return memberParams{}
			}
			i++
		}
	}
	return p
}

// skipBareItem moves past an sf-token, sf-string, integer or boolean.
func skipBareItem(v []byte, i int) (int, bool) {
	if i >= len(v) {
		return i, false
	}
	switch c := v[i]; {
	case c == '"':
		for i++; i < len(v); i++ {
			switch v[i] {
			case '\\':
				i++
			case '"':
				return i + 1, true
			}
		}
		return i, false
	case c == '?':
		if i+1 < len(v) && (v[i+1] == '0' || v[i+1] == '1') {
			return i + 2, true
		}
		return i, false
	case c == '-' || c >= '0' && c <= '9':
		j := i + 1
		for j < len(v) && (v[j] >= '0' && v[j] <= '9' || v[j] == '.') {
			j++
		}
		return j, true
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '*':
		j := i + 1
		for j < len(v) && (h1.IsTchar(v[j]) || v[j] == ':' || v[j] == '/') {
			j++
		}
		return j, true
	}
	return i, false
}
