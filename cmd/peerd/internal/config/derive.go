package config

// This file holds what is checked and built from a decoded config: the
// validation across sections, the files it names, the warnings -check
// prints, and the options, routes, rules and access policy the running
// parts are made of.

import (
	"fmt"
	"math"
	"net"
	"net/netip"
	"reflect"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/peerd/peerd/access"
	"github.com/peerd/peerd/auth"
	"github.com/peerd/peerd/forwarding"
	"github.com/peerd/peerd/internal/conf"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
)

// validate runs every section's own validation and the cross-section checks.
func (c *File) validate() []error {
	var es conf.Errors
	es.Add(c.Proxy.Validate())
	es.Add(c.Access.Validate())
	es.Add(c.Health.Validate())
	es.Add(c.Selection.Validate())
	es.Add(c.Admin.Validate())
	es.Add(c.Cache.Validate())
	es.Add(c.Fleet.Validate())
	es.Add(c.ICP.Validate())
	es.Add(c.Auth.Validate())
	es.Add(c.Log.Validate())
	es.Add(c.Trace.Validate())
	es.Add(peers.ValidateSpecs(c.Peers))
	if _, err := c.CompiledRoutes(); err != nil {
		es.Add(err)
	}
	if _, err := forwarding.CompileRules(c.Rules); err != nil {
		es.Add(err)
	}

	es = append(es, c.neverForwards()...)
	if c.Proxy.Listen == c.Admin.Listen && !strings.HasSuffix(c.Proxy.Listen, ":0") {
		es.Addf("admin", "listen", "%q is also proxy.listen", c.Admin.Listen)
	}
	return es
}

// neverForwards finds what could never forward a request, or serves
// nobody: direct = "never" with no parent to send to (none at all, or
// siblings only, which answer only what they hold), for every request or
// for a route's; a first route that catches every request with no peer
// and direct "never"; [proxy] allow = [] (every client refused).
func (c *File) neverForwards() []error {
	var es conf.Errors
	if len(c.Proxy.Allow) == 0 {
		es.Addf("proxy", "allow", `[]: every client would be refused (403) while /readyz says ready; list the client networks (e.g. ["10.0.0.0/8"]), or leave the key out for the private networks`)
	}
	types := map[string]peers.Type{}
	parents := 0
	for _, p := range c.Peers {
		types[p.Name] = p.Type
		if p.Type == peers.Parent {
			parents++
		}
	}
	if c.Proxy.Direct == selection.DirectNever && parents == 0 {
		what := "no peer"
		if len(c.Peers) > 0 {
			what = "siblings only"
		}
		es.Addf("proxy", "direct", `"never" with %s: no request could ever be forwarded (add a parent, or allow direct)`, what)
	}
	for i, r := range c.Routes {
		direct := c.Proxy.Direct
		if r.Direct != "" {
			d, err := selection.ParseDirect(r.Direct)
			if err != nil {
				continue // CompileRoutes names it
			}
			direct = d
		}
		if direct != selection.DirectNever {
			continue
		}
		if len(r.Peers) == 0 {
			if i == 0 && reflect.ValueOf(r.Spec).IsZero() {
				es.Add(&conf.Error{Section: "route", Index: i, Name: fmt.Sprint(i), Key: "peers",
					Msg: `[] with direct "never" in the first route, which has no match key: every request matches it and none could be forwarded (every client would get 503); give it peers, allow direct, or match keys`})
			}
			continue
		}
		hasParent := false
		for _, n := range r.Peers {
			hasParent = hasParent || types[n] == peers.Parent
		}
		if !hasParent {
			es.Add(&conf.Error{Section: "route", Index: i, Name: fmt.Sprint(i), Key: "peers",
				Msg: `siblings only, with direct "never": no request of this route could ever be forwarded (add a parent, or allow direct)`})
		}
	}
	return es
}

// checkFiles reads the files the config names: the peers' certificates,
// the TLS listener's, the htpasswd file.
func (c *File) checkFiles() []error {
	var es conf.Errors
	if _, err := BuildPeerTLS(c.Peers); err != nil {
		es.Add(err)
	}
	es.Add(checkClientTLS(c.Proxy.TLSCert, c.Proxy.TLSKey))
	es.Add(forwarding.CheckOutgoingAddress(c.Proxy.OutgoingAddress))
	if _, err := auth.Load(c.Auth); err != nil {
		es.Add(&conf.Error{Section: "auth", Key: "basic_users", Msg: strings.TrimPrefix(err.Error(), "auth.basic_users: ")})
	}
	return append(es, c.checkPaths()...)
}

// PeerOptions builds the registry options from the config: the peers'
// health settings, and how parents are judged against each other (each
// [[route]]'s parents a group; origin by origin under a hashing policy).
func (c *File) PeerOptions(log logrus.FieldLogger) peers.Options {
	o := peers.Options{Health: c.Health, ConnectTimeout: c.Proxy.ConnectTimeout, ReadTimeout: c.Proxy.ReadTimeout, Log: log, Matched: c.hashing()}
	for _, r := range c.Routes {
		o.Groups = append(o.Groups, r.Peers)
	}
	return o
}

// hashing reports whether any plan hashes its parents (carp, sourcehash).
func (c *File) hashing() bool {
	hashed := func(p selection.Policy) bool { return p == selection.CARP || p == selection.SourceHash }
	if hashed(c.Selection.Policy) {
		return true
	}
	for _, r := range c.Routes {
		if p, err := selection.ParsePolicy(r.Policy); r.Policy != "" && err == nil && hashed(p) {
			return true
		}
	}
	return false
}

// PlannerOptions builds the selection options from the config.
func (c *File) PlannerOptions() selection.Options {
	routes, _ := c.CompiledRoutes() // validated before use
	return selection.Options{Policy: c.Selection.Policy, Direct: c.Proxy.Direct, MaxTries: c.Proxy.ForwardMaxTries, Routes: routes}
}

// CompiledRoutes compiles [[route]] against the configured peers.
func (c *File) CompiledRoutes() ([]selection.Route, error) {
	names := map[string]bool{}
	for _, p := range c.Peers {
		names[p.Name] = true
	}
	return selection.CompileRoutes(c.Routes, names)
}

// CompiledRules compiles [[rule]] (validated before use).
func (c *File) CompiledRules() []forwarding.Rule {
	rs, _ := forwarding.CompileRules(c.Rules)
	return rs
}

// Warnings are what a valid config may still get wrong, printed by -check
// and logged at start.
func (c *File) Warnings() []string {
	var w []string
	for _, p := range c.Peers {
		if p.Login != "" && !p.TLS {
			w = append(w, fmt.Sprintf("peer %q: login is sent in clear text (no tls = true): anyone on the path to the peer can read it", p.Name))
		}
	}
	if t := c.Admin.Token; t != "" && tokenBits(t) < 128 {
		w = append(w, fmt.Sprintf("admin.token: about %d bits; a token under 128 bits can be guessed, use e.g. `openssl rand -base64 24`", tokenBits(t)))
	}
	for i, r := range c.Rules {
		if r.Action != "deny" || !reflect.ValueOf(r.Spec).IsZero() {
			continue
		}
		for j := i + 1; j < len(c.Rules); j++ {
			if c.Rules[j].Action == "allow" {
				w = append(w, fmt.Sprintf("[[rule]] #%d denies every request (it has no match key): [[rule]] #%d and every allow after it are never reached", i+1, j+1))
				break
			}
		}
		break
	}
	if a, open := forwarding.OpenProxy(c.Proxy, c.CompiledRules(), c.Auth.BasicUsers != ""); open {
		for _, l := range []string{c.Proxy.Listen, c.Proxy.TLSListen} {
			if l != "" && !forwarding.OnLoopback(l) {
				w = append(w, fmt.Sprintf("open proxy: %s serves a client from anywhere (e.g. %s) without credentials: narrow [proxy] allow, or add [[rule]]s or [auth]", l, a))
				break
			}
		}
	}
	w = append(w, c.stateDirWarning()...)
	return append(w, c.secretWarnings()...)
}

// tokenBits estimates a token's strength from its length and alphabet,
// as if each character were chosen at random from that alphabet.
func tokenBits(t string) int {
	var lower, upper, digit, other bool
	for _, r := range t {
		switch {
		case 'a' <= r && r <= 'z':
			lower = true
		case 'A' <= r && r <= 'Z':
			upper = true
		case '0' <= r && r <= '9':
			digit = true
		default:
			other = true
		}
	}
	size := 0
	for _, n := range []struct {
		has bool
		n   int
	}{{lower, 26}, {upper, 26}, {digit, 10}, {other, 32}} {
		if n.has {
			size += n.n
		}
	}
	if isHex(t) {
		size = 16
	}
	return int(float64(len(t)) * math.Log2(float64(max(size, 2))))
}

func isHex(t string) bool {
	for _, r := range t {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f' || 'A' <= r && r <= 'F') {
			return false
		}
	}
	return true
}

// policy compiles the destination policy. peerd's own listen, admin,
// fleet and ICP addresses are refused as destinations (deny_to_local); a
// wildcard listen address stands for every address of the host's
// interfaces.
func (c *File) Policy() (*access.Policy, error) {
	var own []netip.AddrPort
	var local []netip.Addr
	for _, l := range []string{c.Proxy.Listen, c.Admin.Listen, c.Fleet.Bind, c.ICP.Listen, c.Proxy.TLSListen} {
		ap, err := netip.ParseAddrPort(l)
		if err != nil {
			continue
		}
		if !ap.Addr().IsUnspecified() {
			own = append(own, ap)
			continue
		}
		if local == nil {
			local = interfaceAddrs()
		}
		for _, a := range local {
			own = append(own, netip.AddrPortFrom(a, ap.Port()))
		}
	}
	return access.Compile(c.Access, own)
}

func interfaceAddrs() []netip.Addr {
	addrs, _ := net.InterfaceAddrs()
	out := []netip.Addr{}
	for _, a := range addrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, pfx.Addr().Unmap())
		}
	}
	return out
}
