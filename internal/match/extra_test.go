package match

import (
	"testing"
	"time"
)

// TestExtraKeys: the keys that carry Squid's browser, referer_regex,
// req_header, time, maxconn and max_user_ip ACLs over.
func TestExtraKeys(t *testing.T) {
	// Wednesday 2026-12-02 at 09:30 local time, and Saturday at 23:00.
	wed := time.Date(2026, 12, 2, 9, 30, 0, 0, time.Local)
	sat := time.Date(2026, 12, 5, 23, 0, 0, 0, time.Local)
	fields := func(kv ...string) Facts { return facts{fields: kv} }
	n := func(v int) Facts { return facts{conns: v} }
	for _, tc := range []struct {
		name string
		spec Spec
		req  Request
		want bool
	}{
		{"browser matches", Spec{UserAgents: []string{"(?i)msie"}}, Request{Facts: fields("User-Agent", "Mozilla/4.0 (MSIE 6.0)")}, true},
		{"browser misses", Spec{UserAgents: []string{"(?i)msie"}}, Request{Facts: fields("User-Agent", "curl/8")}, false},
		{"no User-Agent matches no browser", Spec{UserAgents: []string{"."}}, Request{}, false},
		{"negated browser", Spec{UserAgents: []string{"!curl"}}, Request{Facts: fields("User-Agent", "Mozilla")}, true},
		{"referer", Spec{Referers: []string{`^https?://intranet\.`}}, Request{Facts: fields("Referer", "http://intranet.corp/x")}, true},
		{"req_header", Spec{Headers: []string{"X-Team: ^ops$"}}, Request{Facts: fields("X-Team", "ops")}, true},
		{"req_header absent", Spec{Headers: []string{"X-Team: ."}}, Request{}, false},
		{"negated req_header, absent", Spec{Headers: []string{"!X-Team: ."}}, Request{}, true},
		// Squid: an absent field matches no expression; an empty one is "".
		{"empty User-Agent matches ^$", Spec{UserAgents: []string{"^$"}}, Request{Facts: fields("User-Agent", "")}, true},
		{"absent User-Agent does not match ^$", Spec{UserAgents: []string{"^$"}}, Request{}, false},
		{"empty Referer matches ^$", Spec{Referers: []string{"^$"}}, Request{Facts: fields("Referer", "")}, true},
		{"empty req_header matches ^$", Spec{Headers: []string{"X-Team: ^$"}}, Request{Facts: fields("X-Team", "")}, true},
		{"absent req_header does not match ^$", Spec{Headers: []string{"X-Team: ^$"}}, Request{}, false},
		{"negated ^$, empty field", Spec{UserAgents: []string{"!^$"}}, Request{Facts: fields("User-Agent", "")}, false},
		{"office hours, in", Spec{Times: []string{"MTWHF 08:00-17:30"}}, Request{Now: wed}, true},
		{"office hours, weekend", Spec{Times: []string{"MTWHF 08:00-17:30"}}, Request{Now: sat}, false},
		{"D is the weekdays", Spec{Times: []string{"D"}}, Request{Now: wed}, true},
		{"hours alone, every day", Spec{Times: []string{"22:00-24:00"}}, Request{Now: sat}, true},
		{"not office hours", Spec{Times: []string{"!MTWHF 08:00-17:30"}}, Request{Now: sat}, true},
		{"maxconn over", Spec{MaxConn: 4}, Request{Facts: n(5)}, true},
		{"maxconn at", Spec{MaxConn: 4}, Request{Facts: n(4)}, false},
	} {
		m, err := Compile(tc.spec)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := m.Match(&tc.req); got != tc.want {
			t.Errorf("%s: %v; want %v", tc.name, got, tc.want)
		}
	}
	m, _ := Compile(Spec{MaxUserIP: 1})
	if !m.NeedsUser() {
		t.Fatal("max_user_ip does not ask for the user")
	}
	two := facts{addrs: 2}
	if r := (Request{User: "alice", Facts: two}); !m.Match(&r) {
		t.Error("alice from 2 addresses does not match max_user_ip 1")
	}
	if r := (Request{Facts: two}); m.Match(&r) {
		t.Error("no user matched max_user_ip")
	}
	for _, bad := range []Spec{{Times: []string{"XYZ"}}, {Times: []string{"MTWHF 17:00-08:00"}}, {Headers: []string{"no colon"}}, {Headers: []string{"X: ("}}, {MaxConn: -1}} {
		if _, err := Compile(bad); err == nil {
			t.Errorf("%+v compiled", bad)
		}
	}
}

// facts is a request's Facts for the tests: fields as name, value pairs.
type facts struct {
	fields       []string
	conns, addrs int
}

func (f facts) Field(name string) (string, bool) {
	for i := 0; i+1 < len(f.fields); i += 2 {
		if f.fields[i] == name {
			return f.fields[i+1], true
		}
	}
	return "", false
}
func (f facts) Conns() int           { return f.conns }
func (f facts) UserAddrs(string) int { return f.addrs }
