package admin

// This file holds the admin API's guard against DNS rebinding: a page
// on another site can make a browser send requests to 127.0.0.1:3180
// under a name the attacker controls, and read the answers as its own.
// The API answers only requests whose Host is its listen address (a
// loopback address when it listens on every address), localhost, or a
// name from [admin] hosts; others get 421 (RFC 9110 15.5.20).

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
)

// hostGuard knows the Host values the API answers to.
type hostGuard struct{ p atomic.Pointer[hostsInForce] }

// hostsInForce are the listen address (unspecified: any address of this
// host) and the names answered to, swapped whole on reload.
type hostsInForce struct {
	listen netip.Addr
	names  map[string]bool
}

// set puts a new [admin] hosts list in force (on start and reload).
func (g *hostGuard) set(listen string, hosts []string) {
	h := &hostsInForce{names: map[string]bool{"localhost": true}}
	if ap, err := netip.ParseAddrPort(listen); err == nil {
		h.listen = ap.Addr().Unmap()
	}
	for _, n := range hosts {
		h.names[normalHost(n)] = true
	}
	g.p.Store(h)
}

// normalHost is a host name compared: lower case, no trailing dot.
func normalHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// allows reports whether a request's Host may be answered. A request
// without one (HTTP/1.0) comes from no browser, and is answered.
func (g *hostGuard) allows(hostport string) bool {
	if hostport == "" {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	h := g.p.Load()
	if h == nil {
		return false
	}
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap()
		// An address is no name to rebind: the listen address, a loopback
		// one, or any when the API listens on every address.
		return a == h.listen || a.IsLoopback() || h.listen.IsUnspecified()
	}
	return h.names[normalHost(host)]
}

// guardHost wraps the router: a Host the API does not answer to gets 421.
func (a *API) guardHost(w http.ResponseWriter, r *http.Request) bool {
	if a.hosts.allows(r.Host) {
		return true
	}
	a.log.WithField("remote", sourceOf(r)).WithField("host", r.Host).Debug("admin request refused: Host is not the admin address, localhost or [admin] hosts")
	writeError(w, http.StatusMisdirectedRequest, "Host "+r.Host+" is not this admin API's address, localhost or a name in [admin] hosts")
	return false
}
