package squidimport

// This file holds the translation of the ACL types that look past the
// URL and the client's address: browser, referer_regex, req_header, time,
// maxconn and max_user_ip, into [[rule]]'s user_agents, referers,
// headers, times, max_conn and max_user_ip.

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// intKeys are the match keys that hold one number, not a list.
var intKeys = map[string]bool{"max_conn": true, "max_user_ip": true}

// requestCondition is condition for the types of this file; ok false
// for any other type.
func (a *squidACL) requestCondition(name string) (key string, vals []string, ok bool, err error) {
	regexps := func(key string, values []string, fold bool) (string, []string, bool, error) {
		var out []string
		for _, v := range values {
			re := v
			if fold {
				re = "(?i)" + re
			}
			if _, err := regexp.Compile(re); err != nil {
				return "", nil, true, fmt.Errorf("acl %s %s %q: not an RE2 expression", name, a.typ, v)
			}
			out = append(out, re)
		}
		return key, out, true, nil
	}
	switch a.typ {
	case "browser":
		return regexps("user_agents", a.values, a.flags["-i"])
	case "referer_regex":
		return regexps("referers", a.values, a.flags["-i"])
	case "req_header":
		// acl NAME req_header FIELD [-i] regex...
		field, rest := a.values[0], a.values[1:]
		fold := a.flags["-i"]
		if len(rest) > 0 && rest[0] == "-i" {
			fold, rest = true, rest[1:]
		}
		if len(rest) == 0 || strings.ContainsAny(field, " :") {
			return "", nil, true, fmt.Errorf("acl %s req_header: want a field name and an expression", name)
		}
		k, res, _, err := regexps("headers", rest, fold)
		for i, re := range res {
			res[i] = field + ": " + re
		}
		return k, res, true, err
	case "time":
		var out []string
		for i := 0; i < len(a.values); i++ {
			spec := a.values[i]
			if !strings.Contains(spec, ":") && i+1 < len(a.values) && strings.Contains(a.values[i+1], ":") {
				spec += " " + a.values[i+1]
				i++
			}
			out = append(out, spec)
		}
		return "times", out, true, nil
	case "maxconn", "max_user_ip":
		n, err := strconv.Atoi(a.values[len(a.values)-1])
		if err != nil || n < 0 || len(a.values) != 1 {
			return "", nil, true, fmt.Errorf("acl %s %s: want one number", name, a.typ)
		}
		if a.typ == "max_user_ip" && a.flags["-s"] {
			return "", nil, true, fmt.Errorf("acl %s max_user_ip -s: the strict mode has no peerd equivalent", name)
		}
		return map[string]string{"maxconn": "max_conn", "max_user_ip": "max_user_ip"}[a.typ], []string{strconv.Itoa(n)}, true, nil
	}
	return "", nil, false, nil
}
