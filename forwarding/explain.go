package forwarding

// This file holds the proxy's own word on a request that GET /plan
// explains: whether it would be refused before any plan is walked.

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/peerd/peerd/access"
	"github.com/peerd/peerd/internal/match"
)

// Refusal says why the proxy would refuse a request for rawURL (host:port
// for CONNECT) from client before planning it, in the words the client's
// answer would carry; "" when it would be planned. It applies the same
// checks as a real request, in the same order: [proxy] allow, the
// canonical host, the ports and deny_to of [access]. DIRECT's own check
// of the resolved address happens at the connect and is not predicted.
func (p *Proxy) Refusal(method, rawURL, client, user string) (string, int) {
	d, rule := p.refusal(method, rawURL, client, user)
	return d, rule
}

func (p *Proxy) refusal(method, rawURL, client, user string) (string, int) {
	g := p.current()
	c := g.cfg
	a, err := netip.ParseAddr(client)
	if err != nil || !c.allowed(a.Unmap()) {
		return CodeAccessDenied + ": client " + client + " is not in [proxy] allow", -1
	}
	var host, port string
	var u *url.URL
	connect := strings.EqualFold(method, http.MethodConnect)
	if connect {
		if host, port, err = net.SplitHostPort(rawURL); err != nil {
			return CodeBadRequest + ": CONNECT needs host:port", -1
		}
	} else {
		u, err = url.Parse(rawURL)
		if err != nil || u.Host == "" {
			return CodeBadRequest + ": not an absolute URL", -1
		}
		host, port = u.Hostname(), u.Port()
		if port == "" {
			port = "80"
			if u.Scheme == "https" {
				port = "443"
			}
		}
	}
	canon, changed, err := access.CanonicalHost(nil, []byte(host))
	if err != nil {
		return CodeBadRequest + ": host " + strconv.Quote(host) + ": " + err.Error(), -1
	}
	if changed {
		host = string(canon)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return CodeBadRequest + ": port " + strconv.Quote(port), -1
	}
	list := g.rules
	r := match.Request{Host: host, Client: a.Unmap(), Port: n, Method: method, URL: rawURL, Resolve: p.resolveForRules}
	if changed && connect {
		r.URL = net.JoinHostPort(host, port)
	} else if changed {
		// The host as the request's target would carry it, once made canonical.
		r.URL = strings.Replace(rawURL, "://"+u.Host, "://"+net.JoinHostPort(host, port), 1)
	}
	// The user named is taken as proven; none, where one is needed, is
	// the 407 the request would get.
	login := func() (string, *Error) {
		if user == "" {
			return "", errorf(http.StatusProxyAuthRequired, CodeAuthRequired, "", "credentials needed")
		}
		return user, nil
	}
	rule, e := walkRules(list, &r, g.auth != nil, login)
	if e != nil {
		if e.Code == CodeAccessDenied {
			return fmt.Sprintf("%s: refused by %s", CodeAccessDenied, list[rule].name), rule
		}
		if rule >= 0 {
			return fmt.Sprintf("%s: %s needs a user; pass &user=NAME", CodeAuthRequired, list[rule].name), rule
		}
		return CodeAuthRequired + ": [auth] needs a user; pass &user=NAME", rule
	}
	pol := g.policy
	if err := pol.CheckPort(connect, n); err != nil {
		return CodeDenied + ": " + err.Error(), rule
	}
	if err := access.Unspecified([]byte(host)); err != nil {
		return CodeDenied + ": " + err.Error(), rule
	}
	if pol.HostChecks() {
		if err := pol.CheckHost(host); err != nil {
			return CodeDenied + ": " + err.Error(), rule
		}
	}
	return "", rule
}
