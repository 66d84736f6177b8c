// Package nexthop reads what a proxy's answer says about its own next hop:
// the error type of its own member of Proxy-Status (RFC 9209, the last:
// members are listed from the origin's side), Squid's X-Squid-Error, and
// peerd's own signals (X-Peerd-Error: no-peers; the no-next-hop parameter
// of its Proxy-Status member). From them it says whether the request
// never reached the origin — the proxy's next hop failed before anything
// was sent there — which is never the proxy's own failure; whether the
// failure is the proxy's own; and whether the proxy has no usable next hop
// at all. It parses bytes from the network and never fails on them.
package nexthop

import (
	"bytes"
	"cmp"
)

// Said is what an answer says about the proxy that gave it.
type Said struct {
	// Type is the error type of the proxy's own Proxy-Status member
	// ("": none).
	Type string
	// Unreached: the request never reached the origin (the proxy could
	// not resolve it, connect to it, or had no next hop for it).
	Unreached bool
	// Own: a failure of the proxy's own (an internal error, a
	// configuration error, Squid shutting down).
	Own bool
	// NoNextHop: the proxy has no usable next hop for its default route
	// (a peerd that is a parent says so).
	NoNextHop bool
	// Why names what said it: the error type, else Squid's error id,
	// else peerd's error code ("" when nothing was said).
	Why string
}

// Answer is the parts of an answer Read looks at: its Proxy-Status field
// values in order, and its X-Squid-Error and X-Peerd-Error values (nil
// when absent).
type Answer struct {
	ProxyStatus [][]byte
	SquidError  []byte
	PeerdError  []byte
}

// Read says what a final answer says about the proxy that gave it.
func Read(a Answer) Said {
	var s Said
	var params memberParams
	for _, v := range a.ProxyStatus {
		params = lastMember(v)
	}
	s.Type, s.NoNextHop = params.errType, params.noNextHop
	switch s.Type {
	case "proxy_internal_error", "proxy_configuration_error", "proxy_internal_response":
		s.Own = true
	case "dns_timeout", "dns_error", "destination_not_found", "destination_unavailable",
		"destination_ip_prohibited", "destination_ip_unroutable", "connection_refused",
		"connection_timeout", "connection_limit_reached", "tls_protocol_error", "tls_certificate_error":
		s.Unreached = true
	}
	s.Why = s.Type
	switch id := squidID(a.SquidError); id {
	case "ERR_SHUTTING_DOWN":
		s.Own = true
		s.Why = cmp.Or(s.Why, id)
	case "ERR_CONNECT_FAIL", "ERR_DNS_FAIL", "ERR_CANNOT_FORWARD", "ERR_FORWARDING_DENIED",
		"ERR_SECURE_CONNECT_FAIL", "ERR_NO_RELAY":
		s.Unreached = true
		s.Why = cmp.Or(s.Why, id)
	}
	if bytes.Equal(bytes.TrimSpace(a.PeerdError), []byte("no-peers")) {
		s.Unreached = true
		s.Why = cmp.Or(s.Why, "no-peers")
	}
	if s.Own {
		s.Unreached = false // its own failure first: the request may have reached it whole
	}
	return s
}

// UnreachedSquidErrors and UnreachedTypes are what Read takes to mean that
// the request never reached the origin (the docs list them).
var (
	UnreachedSquidErrors = []string{"ERR_CONNECT_FAIL", "ERR_DNS_FAIL", "ERR_CANNOT_FORWARD", "ERR_FORWARDING_DENIED", "ERR_SECURE_CONNECT_FAIL", "ERR_NO_RELAY"}
	UnreachedTypes       = []string{"dns_timeout", "dns_error", "destination_not_found", "destination_unavailable", "destination_ip_prohibited",
		"destination_ip_unroutable", "connection_refused", "connection_timeout", "connection_limit_reached", "tls_protocol_error", "tls_certificate_error"}
)

// squidID is the error page id of an X-Squid-Error value ("ERR_CONNECT_FAIL
// 111" → "ERR_CONNECT_FAIL").
func squidID(v []byte) string {
	v = bytes.TrimSpace(v)
	if i := bytes.IndexAny(v, " \t"); i >= 0 {
		v = v[:i]
	}
	if len(v) > 64 {
		return ""
	}
	return string(v)
}
