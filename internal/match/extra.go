package match

// This file holds the keys that look past the URL and the client's
// address, so that a squid.conf's access lines carry over without being
// widened (import-squid):
//
//   - user_agents, referers: regular expressions against User-Agent and
//     Referer (Squid browser, referer_regex); a request without the field
//     matches no expression, and one with the field empty is matched as
//     "" (Squid's "acl e browser ^$" catches "User-Agent:" and only it).
//   - headers: "Name: regex" against a request header field (Squid
//     req_header); all the values of a repeated field, joined by ", ";
//     absent and empty differ as above.
//   - times: Squid time specs, "[days] [HH:MM-HH:MM]" in local time, the
//     days as Squid writes them (S M T W H F A, D for Monday to Friday).
//   - max_conn: the client's address has more than N connections open
//     (Squid maxconn); max_user_ip: the user was seen from more than N
//     addresses lately (Squid max_user_ip; it needs the user).
//
// Every list takes "!v" for "not v", as the other keys do.

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Facts are what the keys above ask of a request beyond its URL: a
// header field (and whether the request has it at all), the connections
// open from its client's address, and the addresses a user was seen from
// lately.
type Facts interface {
	Field(name string) (value string, present bool)
	Conns() int
	UserAddrs(user string) int
}

// extra is the compiled form of the keys above.
type extra struct {
	agents, notAgents     []*regexp.Regexp
	referers, notReferers []*regexp.Regexp
	headers               []headerRE
	times, notTimes       []timeSpan
	maxConn, maxUserIP    int
}

// headerRE is one "Name: regex" of headers.
type headerRE struct {
	name string
	re   *regexp.Regexp
	not  bool
}

// timeSpan is one Squid time spec: days of the week (bit d for
// time.Weekday d) and minutes of the day [from, to].
type timeSpan struct {
	days     uint8
	from, to int
}

// compileExtra compiles the keys of this file; nil when s has none.
func compileExtra(s Spec) (*extra, error) {
	if len(s.UserAgents)+len(s.Referers)+len(s.Headers)+len(s.Times) == 0 && s.MaxConn == 0 && s.MaxUserIP == 0 {
		return nil, nil
	}
	x := &extra{maxConn: s.MaxConn, maxUserIP: s.MaxUserIP}
	if s.MaxConn < 0 || s.MaxUserIP < 0 {
		return nil, fmt.Errorf("max_conn and max_user_ip: must not be negative")
	}
	var err error
	if x.agents, x.notAgents, err = regexps("user_agents", s.UserAgents); err != nil {
		return nil, err
	}
	if x.referers, x.notReferers, err = regexps("referers", s.Referers); err != nil {
		return nil, err
	}
	for _, v := range s.Headers {
		v, not := strings.CutPrefix(v, "!")
		name, expr, ok := strings.Cut(v, ":")
		name, expr = strings.TrimSpace(name), strings.TrimSpace(expr)
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			return nil, fmt.Errorf(`headers: %q: want "Name: regex" (e.g. "X-Forwarded-Proto: ^http$")`, v)
		}
		re, err := regexp.Compile(expr)
		if err != nil {
			return nil, fmt.Errorf("headers: %q: %v", v, err)
		}
		x.headers = append(x.headers, headerRE{http.CanonicalHeaderKey(name), re, not})
	}
	for _, v := range s.Times {
		v, not := strings.CutPrefix(v, "!")
		t, err := parseTimeSpan(v)
		if err != nil {
			return nil, fmt.Errorf("times: %q: %v", v, err)
		}
		if not {
			x.notTimes = append(x.notTimes, t)
		} else {
			x.times = append(x.times, t)
		}
	}
	return x, nil
}

// parseTimeSpan reads "[days] [HH:MM-HH:MM]"; at least one of the two.
func parseTimeSpan(v string) (timeSpan, error) {
	t := timeSpan{days: 0x7f, from: 0, to: 24*60 - 1}
	f := strings.Fields(v)
	if len(f) == 0 || len(f) > 2 {
		return t, fmt.Errorf(`want days, hours or both (e.g. "MTWHF 08:00-17:30")`)
	}
	if !strings.Contains(f[0], ":") {
		t.days = 0
		for _, c := range f[0] {
			switch i := strings.IndexRune("SMTWHFA", c); {
			case i >= 0:
				t.days |= 1 << i
			case c == 'D':
				t.days |= 0x3e // Monday to Friday
			default:
				return t, fmt.Errorf("%q is not a day (S M T W H F A, or D for weekdays)", c)
			}
		}
		f = f[1:]
	}
	if len(f) == 1 {
		a, b, ok := strings.Cut(f[0], "-")
		from, err1 := minuteOfDay(a)
		to, err2 := minuteOfDay(b)
		if !ok || err1 != nil || err2 != nil || to < from {
			return t, fmt.Errorf("%q is not HH:MM-HH:MM within a day", f[0])
		}
		t.from, t.to = from, to
	} else if len(f) > 1 {
		return t, fmt.Errorf(`want days, hours or both (e.g. "MTWHF 08:00-17:30")`)
	}
	return t, nil
}

// minuteOfDay reads HH:MM (24:00 is the day's last minute's end).
func minuteOfDay(s string) (int, error) {
	h, m, ok := strings.Cut(s, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil || hh < 0 || hh > 24 || mm < 0 || mm > 59 || hh == 24 && mm > 0 {
		return 0, fmt.Errorf("not HH:MM")
	}
	if hh == 24 {
		return 24*60 - 1, nil
	}
	return hh*60 + mm, nil
}

// in reports whether at falls in the span (the minute, inclusive).
func (t timeSpan) in(at time.Time) bool {
	m := at.Hour()*60 + at.Minute()
	return t.days&(1<<at.Weekday()) != 0 && m >= t.from && m <= t.to
}

// match checks every key but max_user_ip.
func (x *extra) match(r *Request) bool {
	field := func(name string) (string, bool) {
		if r.Facts == nil {
			return "", false
		}
		return r.Facts.Field(name)
	}
	if len(x.agents)+len(x.notAgents) > 0 {
		if v, present := field("User-Agent"); !fieldMatch(x.agents, x.notAgents, v, present) {
			return false
		}
	}
	if len(x.referers)+len(x.notReferers) > 0 {
		if v, present := field("Referer"); !fieldMatch(x.referers, x.notReferers, v, present) {
			return false
		}
	}
	for _, h := range x.headers {
		v, present := field(h.name)
		if (present && h.re.MatchString(v)) == h.not {
			return false
		}
	}
	if len(x.times)+len(x.notTimes) > 0 {
		now := r.Now
		if now.IsZero() {
			now = time.Now()
		}
		now = now.Local()
		if !anyTime(x.times, now, len(x.times) == 0) || anyTime(x.notTimes, now, false) {
			return false
		}
	}
	return x.maxConn == 0 || r.Facts != nil && r.Facts.Conns() > x.maxConn
}

// CountsUserAddrs reports whether m has max_user_ip: only then are the
// addresses users are seen from worth keeping.
func (m *Matcher) CountsUserAddrs() bool { return m.x != nil && m.x.maxUserIP > 0 }

// matchUser checks max_user_ip for the (proven) user.
func (x *extra) matchUser(r *Request) bool {
	return x.maxUserIP == 0 || r.Facts != nil && r.Facts.UserAddrs(r.User) > x.maxUserIP
}

// fieldMatch: an absent field matches no expression (a negated list
// alone then matches); a present one, empty or not, is matched.
func fieldMatch(in, out []*regexp.Regexp, v string, present bool) bool {
	if !present {
		return len(in) == 0
	}
	return (len(in) == 0 || anyMatch(in, v)) && !anyMatch(out, v)
}

// anyTime reports whether at falls in one of ts (empty when there is none).
func anyTime(ts []timeSpan, at time.Time, empty bool) bool {
	if len(ts) == 0 {
		return empty
	}
	for _, t := range ts {
		if t.in(at) {
			return true
		}
	}
	return false
}
