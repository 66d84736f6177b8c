package nexthop

import "testing"

func TestLastError(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want string
		ok   bool
	}{
		{`squid; error=destination_not_found`, "destination_not_found", true},
		{`origin-cdn; fwd-status=200, squid; error=connection_refused; details="refused"`, "connection_refused", true},
		{`squid; error=connection_refused, peerd; next-hop=p1; fwd-status=502`, "", false},
		{`squid; details="a, b; error=x"; error=http_request_denied`, "http_request_denied", true},
		{`"quoted name"; error=connection_timeout`, "connection_timeout", true},
		{`squid; error=`, "", false},
		{`; error=x`, "", false},
		{`squid error=x`, "", false},
		{``, "", false},
		{`a, b; received-status=503; error=destination_unavailable`, "destination_unavailable", true},
	} {
		got, ok := LastError([]byte(tc.v))
		if got != tc.want || ok != tc.ok {
			t.Errorf("%q: %q %v; want %q %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}

// TestRead: what an answer says of the proxy that gave it — the request
// never reached the origin (a Squid error page id, a next-hop error type
// of the proxy's own Proxy-Status member, peerd's no-peers), a failure
// of its own, or no usable next hop at all — read from the proxy's own
// member only (the last), never from one an earlier hop wrote.
func TestRead(t *testing.T) {
	ps := func(vs ...string) [][]byte {
		var out [][]byte
		for _, v := range vs {
			out = append(out, []byte(v))
		}
		return out
	}
	for _, tc := range []struct {
		name string
		a    Answer
		want Said
	}{
		{"Squid cannot connect", Answer{SquidError: []byte("ERR_CONNECT_FAIL 111")}, Said{Unreached: true}},
		{"Squid cannot resolve", Answer{SquidError: []byte("ERR_DNS_FAIL 0")}, Said{Unreached: true}},
		{"Squid has no next hop", Answer{SquidError: []byte("ERR_CANNOT_FORWARD 0")}, Said{Unreached: true}},
		{"Squid may not forward", Answer{SquidError: []byte("ERR_FORWARDING_DENIED")}, Said{Unreached: true}},
		{"Squid read timeout: it may have arrived", Answer{SquidError: []byte("ERR_READ_TIMEOUT 0")}, Said{}},
		{"Squid empty answer: it arrived", Answer{SquidError: []byte("ERR_ZERO_SIZE_OBJECT 0")}, Said{}},
		{"Squid shutting down", Answer{SquidError: []byte("ERR_SHUTTING_DOWN")}, Said{Own: true}},
		{"a refused connect", Answer{ProxyStatus: ps(`squid; error=connection_refused`)}, Said{Type: "connection_refused", Unreached: true}},
		{"a DNS error", Answer{ProxyStatus: ps(`p; error=dns_error`)}, Said{Type: "dns_error", Unreached: true}},
		{"no destination", Answer{ProxyStatus: ps(`p; error=destination_unavailable`)}, Said{Type: "destination_unavailable", Unreached: true}},
		{"terminated: it may have arrived", Answer{ProxyStatus: ps(`p; error=connection_terminated`)}, Said{Type: "connection_terminated"}},
		{"response timeout", Answer{ProxyStatus: ps(`p; error=http_response_timeout`)}, Said{Type: "http_response_timeout"}},
		{"its own", Answer{ProxyStatus: ps(`p; error=proxy_internal_error`)}, Said{Type: "proxy_internal_error", Own: true}},
		{"an earlier hop's, not its own", Answer{ProxyStatus: ps(`far; error=connection_refused, p; next-hop=far; fwd-status=503`)}, Said{}},
		{"the last field's last member", Answer{ProxyStatus: ps(`p; error=connection_refused`, `q; fwd-status=200`)}, Said{}},
		{"peerd's no-peers", Answer{PeerdError: []byte("no-peers")}, Said{Unreached: true}},
		{"peerd's other errors", Answer{PeerdError: []byte("bad-gateway")}, Said{}},
		{"peerd with no next hop at all", Answer{ProxyStatus: ps(`p; error=destination_unavailable; no-next-hop`), PeerdError: []byte("no-peers")},
			Said{Type: "destination_unavailable", Unreached: true, NoNextHop: true}},
		{"peerd's probe answer, no next hop", Answer{ProxyStatus: ps(`p; no-next-hop=?1`)}, Said{NoNextHop: true}},
		{"peerd's probe answer, a next hop", Answer{ProxyStatus: ps(`p; no-next-hop=?0`)}, Said{}},
		{"an earlier hop's no-next-hop", Answer{ProxyStatus: ps(`far; no-next-hop, p; fwd-status=200`)}, Said{}},
		{"nothing", Answer{}, Said{}},
	} {
		got := Read(tc.a)
		got.Why = "" // (below)
		if got != tc.want {
			t.Errorf("%s: %+v; want %+v", tc.name, got, tc.want)
		}
	}
	// What said it, for the logs and upstream_errors.
	for a, want := range map[*Answer]string{
		{SquidError: []byte("ERR_CONNECT_FAIL 111")}:                                          "ERR_CONNECT_FAIL",
		{ProxyStatus: ps(`p; error=dns_error`), SquidError: []byte("ERR_DNS_FAIL 0")}:         "dns_error",
		{PeerdError: []byte("no-peers")}:                                                      "no-peers",
		{ProxyStatus: ps(`p; error=destination_unavailable`), PeerdError: []byte("no-peers")}: "destination_unavailable",
		{}: "",
	} {
		if got := Read(*a).Why; got != want {
			t.Errorf("%+v: why %q; want %q", *a, got, want)
		}
	}
}

// FuzzRead: what a parent's answer says never crashes peerd, an
// error type read from it is one structured-field item, and no answer
// is both its own failure and one that never reached the origin.
func FuzzRead(f *testing.F) {
	for _, s := range []string{`squid; error=destination_not_found`, `a, b; error="x, y"`, `x; details="\"`, `?1; a=-1.5`, `*; error=*a:b/c`, `p; no-next-hop`, `p; no-next-hop=?0`} {
		f.Add(s, "ERR_CONNECT_FAIL 111")
	}
	f.Add("", "ERR_\x00")
	f.Fuzz(func(t *testing.T, v, squid string) {
		// Anything: no panic, and what is accepted is an item.
		got, ok := LastError([]byte(v))
		if !ok && got != "" {
			t.Fatalf("%q: %q without ok", v, got)
		}
		if ok {
			if _, fine := skipBareItem([]byte(got), 0); !fine && got != "" {
				t.Fatalf("%q: error type %q is not an item", v, got)
			}
		}
		s := Read(Answer{ProxyStatus: [][]byte{[]byte(v)}, SquidError: []byte(squid)})
		if s.Own && s.Unreached {
			t.Fatalf("%q %q: its own and never reached at once", v, squid)
		}
	})
}
