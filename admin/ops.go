package admin

// This file holds the operations endpoints: a peer's history, GET /plan
// (explain), reload and its diff.

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/mux"
	"github.com/peerd/peerd/fleet"
	"github.com/peerd/peerd/selection"
	"github.com/sirupsen/logrus"
)

// What an operator asks during an incident: a peer's history, the plan a
// request would get, who changed what.

// GET /peers/{name}/history: the last transitions, newest last.
func (a *API) peerHistory(w http.ResponseWriter, r *http.Request) {
	p := a.peer(w, r)
	if p == nil {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"transitions": p.Health().History()})
}

// GET /plan?url=URL[&method=GET][&client=IP][&user=NAME]: the plan peerd would walk
// for that request now, without sending anything.
func (a *API) plan(w http.ResponseWriter, r *http.Request) {
	if a.explain == nil {
		writeError(w, http.StatusNotImplemented, "plans are not available")
		return
	}
	q := r.URL.Query()
	raw := q.Get("url")
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		writeError(w, http.StatusBadRequest, "missing url parameter: GET /plan?url=http://host/path[&method=GET][&client=IP]")
		return
	case err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https"):
		writeError(w, http.StatusBadRequest, fmt.Sprintf("url %q is not an absolute http or https URL", raw))
		return
	}
	method := q.Get("method")
	if method == "" {
		method = http.MethodGet
	}
	for _, c := range method {
		if c < 'A' || c > 'Z' {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("method %q is not an HTTP method", method))
			return
		}
	}
	client := "127.0.0.1"
	if c := q.Get("client"); c != "" {
		addr, err := netip.ParseAddr(c)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("client %q is not an IP address", c))
			return
		}
		client = addr.Unmap().String() // as the proxy sees a client
	}
	target := raw
	if method == http.MethodConnect {
		target = u.Host
	}
	port, _ := strconv.Atoi(u.Port())
	if port == 0 {
		port = 80
		if u.Scheme == "https" || method == http.MethodConnect {
			port = 443
		}
	}
	host := strings.ToLower(strings.TrimRight(u.Hostname(), "."))
	e := a.explain(selection.Request{Method: method, URL: target, ClientIP: client,
		Host: host, Port: port, User: q.Get("user")})
	if a.fleet != nil && e.Denied == "" && (method == http.MethodGet || method == http.MethodHead) {
		// The fleet member that owns the URL (shared_cache).
		if key, err := cacheKey(raw); err == nil {
			if node, _, _, ok := a.fleet.Owner(key); ok {
				e.Owner = &node
			}
		}
	}
	writeJSON(w, http.StatusOK, e)
}

// ReloadDiff is what a reload changed (POST /reload's answer and the
// SIGHUP log line).
type ReloadDiff struct {
	Status   string       `json:"status"` // "reloaded"
	Kept     []string     `json:"kept"`
	Added    []string     `json:"added"`
	Removed  []string     `json:"removed"`
	Changed  []PeerChange `json:"changed"`
	Settings []string     `json:"settings"`
}

// PeerChange is a kept peer whose settings changed.
type PeerChange struct {
	Peer   string   `json:"peer"`
	Fields []string `json:"fields"`
}

// auditEntry is one admin write.
type auditEntry struct {
	At     time.Time `json:"at"`
	Remote string    `json:"remote"`
	Method string    `json:"method"`
	Path   string    `json:"path"`
	Peer   string    `json:"peer"`
	From   string    `json:"from"`
	To     string    `json:"to"`
	Reason string    `json:"reason"`
}

// auditLen is how many writes GET /audit keeps.
const auditLen = 256

type auditLog struct {
	mu      sync.Mutex
	entries []auditEntry
}

func (l *auditLog) add(e auditEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.entries) == auditLen {
		copy(l.entries, l.entries[1:])
		l.entries = l.entries[:auditLen-1]
	}
	l.entries = append(l.entries, e)
}

func (l *auditLog) list() []auditEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.entries)
}

// record audits and logs one successful admin write.
func (a *API) record(r *http.Request, peer, from, to, reason string) {
	e := auditEntry{At: time.Now().UTC(), Remote: r.RemoteAddr, Method: r.Method, Path: r.URL.Path, Peer: peer, From: from, To: to, Reason: reason}
	if peer == "" {
		peer = mux.Vars(r)["name"]
		e.Peer = peer
	}
	a.audit.add(e)
	a.log.WithFields(logrus.Fields{"remote": e.Remote, "method": e.Method, "path": e.Path, "peer": e.Peer, "from": from, "to": to, "reason": reason}).
		Info("admin write")
}

// GET /audit: the last admin writes, newest last, as a JSON array (the
// contract lists the writes themselves, unwrapped).
func (a *API) listAudit(w http.ResponseWriter, _ *http.Request) {
	entries := a.audit.list()
	if entries == nil {
		entries = []auditEntry{}
	}
	writeJSON(w, http.StatusOK, entries)
}

// fleetStatus is GET /fleet: the members and each member's view of each
// peer; {"enabled": false, "members": [], "peers": {}} when this peerd
// gossips with no one.
func (a *API) fleetStatus(w http.ResponseWriter, _ *http.Request) {
	if a.fleet == nil {
		writeJSON(w, http.StatusOK, fleet.Status{Members: []fleet.Member{}, Peers: map[string]map[string]string{}})
		return
	}
	writeJSON(w, http.StatusOK, a.fleet.Status())
}
