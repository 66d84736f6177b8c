// Package admin is peerd's admin API (contract section 9): the peer list
// and details, probe-now, admin states, reload, health and metrics. Writes
// need a bearer token; with none configured they are refused.
package admin

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"
	"github.com/peerd/peerd/cache"
	"github.com/peerd/peerd/fleet"
	"github.com/peerd/peerd/internal/conf"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
)

// Config is the [admin] section.
type Config struct {
	// Listen is the admin API address; loopback by default.
	Listen string `toml:"listen"`
	// Token is the bearer token every write endpoint requires; empty
	// refuses all writes.
	Token string `toml:"token"`
	// TokenFile holds the token instead, in a file of its own (0600; a
	// relative name is read from systemd's $CREDENTIALS_DIRECTORY when
	// set, for LoadCredential=).
	TokenFile string `toml:"token_file"`
	// Hosts are the names the API answers to besides its listen address
	// and localhost (a guard against DNS rebinding); other Host values
	// get 421.
	Hosts []string `toml:"hosts"`
}

// DefaultConfig returns the built-in [admin] defaults.
func DefaultConfig() Config { return Config{Listen: "127.0.0.1:3180", Hosts: []string{}} }

// Validate reports every problem, each naming its key.
func (c Config) Validate() error {
	var es conf.Errors
	if c.Token != "" && c.TokenFile != "" {
		es.Addf("admin", "token_file", "set token or token_file, not both")
	}
	if _, err := netip.ParseAddrPort(c.Listen); err != nil {
		es.Addf("admin", "listen", "%q is not an ip:port address: %v", c.Listen, err)
	}
	for i, h := range c.Hosts {
		if h == "" || strings.ContainsAny(h, " /:@[]\t") {
			es.Addf("admin", "hosts", "[%d] %q is not a host name (no port, no scheme)", i, h)
		}
	}
	return es.Err()
}

// Prober runs a probe on demand; *probes.Prober is one.
type Prober interface {
	ProbeNow(ctx context.Context, name string) (*peers.Peer, error)
}

// Options wire the API.
type Options struct {
	Registry *peers.Registry
	Prober   Prober
	// Reload re-reads the config file and says what changed; nil
	// disables POST /reload.
	Reload func() (ReloadDiff, error)
	// Explain returns the plan for a request without sending it (GET
	// /plan); nil disables it.
	Explain  func(selection.Request) selection.Explanation
	Gatherer prometheus.Gatherer
	Log      logrus.FieldLogger
	// Cache returns the HTTP cache in use (nil when it is off); nil
	// means peerd has none.
	Cache func() *cache.Cache
	// Fleet is the fleet membership (GET /fleet); nil means none.
	Fleet *fleet.Fleet
	// Name and Version head the status page.
	Name, Version string
	// Listen and Hosts are the [admin] listen address and hosts: the
	// Host values answered.
	Listen string
	Hosts  []string
	// Ready answers GET /readyz: ready or not, and the JSON body saying
	// why (nil: always ready while serving).
	Ready func() (bool, any)
	// Facts are what the status page says of the process (nil: nothing).
	Facts func() Facts
	// HedgesLeft is how many hedges hedge_budget allows now (GET /peers
	// hedges_budget_left; nil: 0).
	HedgesLeft func() int64
}

// API is the admin HTTP handler.
type API struct {
	reg        *peers.Registry
	prober     Prober
	reload     func() (ReloadDiff, error)
	explain    func(selection.Request) selection.Explanation
	audit      auditLog
	log        logrus.FieldLogger
	token      atomic.Pointer[string]
	router     *mux.Router
	guard      *tokenGuard
	hosts      hostGuard
	ready      func() (bool, any)
	facts      func() Facts
	hedgesLeft func() int64
	cache      func() *cache.Cache
	fleet      *fleet.Fleet
	name       string
	version    string
}

// New builds the API with the given token.
func New(o Options, token string) *API {
	a := &API{reg: o.Registry, prober: o.Prober, reload: o.Reload, explain: o.Explain, log: o.Log, guard: newTokenGuard(), cache: o.Cache, fleet: o.Fleet, name: o.Name, version: o.Version, ready: o.Ready, facts: o.Facts, hedgesLeft: o.HedgesLeft}
	if a.cache == nil {
		a.cache = func() *cache.Cache { return nil }
	}
	if a.log == nil {
		a.log = logrus.StandardLogger()
	}
	a.SetToken(token)
	a.SetHosts(o.Listen, o.Hosts)
	r := mux.NewRouter()
	r.HandleFunc("/peers", a.listPeers).Methods(http.MethodGet)
	r.HandleFunc("/peers/{name}", a.getPeer).Methods(http.MethodGet)
	r.HandleFunc("/peers/{name}/history", a.peerHistory).Methods(http.MethodGet)
	r.HandleFunc("/peers/{name}/probe", a.write(a.probePeer)).Methods(http.MethodPost)
	r.HandleFunc("/peers/{name}/state", a.write(a.setState)).Methods(http.MethodPut)
	r.HandleFunc("/reload", a.write(a.doReload)).Methods(http.MethodPost)
	r.HandleFunc("/cache", a.cacheStats).Methods(http.MethodGet)
	r.HandleFunc("/plan", a.plan).Methods(http.MethodGet)
	r.HandleFunc("/audit", a.listAudit).Methods(http.MethodGet)
	r.HandleFunc("/fleet", a.fleetStatus).Methods(http.MethodGet)
	r.HandleFunc("/cache", a.write(a.purgeCache)).Methods(http.MethodDelete)
	r.HandleFunc("/", a.statusPage).Methods(http.MethodGet)
	r.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}).Methods(http.MethodGet)
	r.HandleFunc("/readyz", a.readyz).Methods(http.MethodGet)
	if o.Gatherer != nil {
		r.Handle("/metrics", promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{})).Methods(http.MethodGet)
	}
	r.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	r.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s", r.Method, r.URL.Path))
	})
	a.router = r
	return a
}

// readyz is GET /readyz: 200 while peerd should be sent requests, 503
// with the reason otherwise (healthz stays liveness).
func (a *API) readyz(w http.ResponseWriter, _ *http.Request) {
	if a.ready == nil {
		writeJSON(w, http.StatusOK, map[string]any{"ready": true})
		return
	}
	ok, body := a.ready()
	status := http.StatusOK
	if !ok {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, body)
}

// SetToken replaces the write token (on reload).
func (a *API) SetToken(t string) { a.token.Store(&t) }

// SetHosts puts the admin listen address and [admin] hosts in force (on
// reload): the Host values answered.
func (a *API) SetHosts(listen string, hosts []string) { a.hosts.set(listen, hosts) }

func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if a.guardHost(w, r) {
		a.router.ServeHTTP(w, r)
	}
}

// write guards a write endpoint: 403 when no token is configured, 401
// without the right bearer token (the scheme is case-insensitive, RFC 9110
// 11.1). A source past its failure allowance gets 429 before its token is
// looked at, so guessing is bounded by time, not by how many connections
// a guesser opens; other sources are not held up by it. The compare is
// constant-time.
func (a *API) write(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token := *a.token.Load()
		if token == "" {
			writeError(w, http.StatusForbidden, "write endpoints are disabled: set [admin] token")
			return
		}
		src := sourceOf(r)
		if a.guard.over(src) {
			a.log.WithField("remote", src).Debug("admin write refused: too many failed token attempts from this source")
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusTooManyRequests, "too many failed token attempts from this address; slow down")
			return
		}
		scheme, got, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
		if ok && strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(token)) == 1 {
			h(w, r)
			return
		}
		if a.guard.failed(src) {
			// Past the allowance: the answer waits, and says to slow down.
			a.log.WithField("remote", src).Debug("admin write refused: missing or wrong bearer token (slowed down)")
			select {
			case <-time.After(failDelay):
			case <-r.Context().Done():
				return
			}
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusTooManyRequests, "too many failed token attempts; slow down")
			return
		}
		a.log.WithField("remote", src).Warn("admin write refused: missing or wrong bearer token")
		w.Header().Set("WWW-Authenticate", `Bearer realm="peerd"`)
		writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
	}
}

// sourceOf is a request's client address without the port.
func sourceOf(r *http.Request) string {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().Unmap().String()
	}
	return r.RemoteAddr
}

// maxTTL bounds an admin state's ttl.
const maxTTL = 366 * 24 * time.Hour

// maxBody bounds an admin request body.
const maxBody = 1 << 20

// decodeBody decodes exactly one JSON value of at most maxBody bytes into
// v, refusing unknown fields and anything after the value. It answers the
// client itself and reports false on a bad body.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return false
	}
	if len(body) > maxBody {
		writeError(w, http.StatusRequestEntityTooLarge, "body larger than 1 MiB")
		return false
	}
	if err := decodeJSON(body, v); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return false
	}
	return true
}

// decodeJSON decodes exactly one JSON value into v.
func decodeJSON(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("bad JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("bad JSON: unexpected data after the value")
	}
	return nil
}

func (a *API) listPeers(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if k != "state" && k != "type" {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("unknown filter %q (want state or type)", k))
			return
		}
	}
	var f peers.Filter
	if v := q.Get("state"); v != "" {
		st, err := peers.ParseState(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		f.State = &st
	}
	if v := q.Get("type"); v != "" {
		typ, err := peers.ParseType(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		f.Type = &typ
	}
	snaps := a.reg.List(f)
	out := make([]peerView, len(snaps))
	for i, s := range snaps {
		out[i] = a.viewOf(s)
	}
	var left int64
	if a.hedgesLeft != nil {
		left = a.hedgesLeft()
	}
	writeJSON(w, http.StatusOK, map[string]any{"peers": out, "hedges_budget_left": left})
}

func (a *API) peer(w http.ResponseWriter, r *http.Request) *peers.Peer {
	name := mux.Vars(r)["name"]
	p := a.reg.Get(name)
	if p == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown peer %q", name))
	}
	return p
}

func (a *API) getPeer(w http.ResponseWriter, r *http.Request) {
	if p := a.peer(w, r); p != nil {
		writeJSON(w, http.StatusOK, a.viewOf(p.Health().Snapshot()))
	}
}

func (a *API) probePeer(w http.ResponseWriter, r *http.Request) {
	if a.peer(w, r) == nil {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
	defer cancel()
	name := mux.Vars(r)["name"]
	before := ""
	if p := a.reg.Get(name); p != nil {
		before = p.Health().State().String()
	}
	p, err := a.prober.ProbeNow(ctx, name)
	if p != nil {
		a.record(r, name, before, p.Health().State().String(), "probe")
	}
	switch {
	case errors.Is(err, peers.ErrUnknownPeer):
		writeError(w, http.StatusNotFound, err.Error())
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "probe: "+err.Error())
	default:
		writeJSON(w, http.StatusOK, a.viewOf(p.Health().Snapshot()))
	}
}

func (a *API) setState(w http.ResponseWriter, r *http.Request) {
	if a.peer(w, r) == nil {
		return
	}
	var body struct {
		AdminState *string `json:"admin_state"`
		Reason     string  `json:"reason"`
		TTL        string  `json:"ttl"`
	}
	if !decodeBody(w, r, &body) {
		return
	}
	if body.AdminState == nil {
		writeError(w, http.StatusBadRequest, `missing "admin_state" (enabled, drain or maintenance)`)
		return
	}
	s, err := peers.ParseAdminState(*body.AdminState)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	var ttl time.Duration
	if body.TTL != "" {
		if ttl, err = time.ParseDuration(body.TTL); err != nil || ttl <= 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf(`"ttl": %q is not a positive duration (e.g. "30m")`, body.TTL))
			return
		}
		if ttl > maxTTL {
			// Far enough for any maintenance, and far from now + ttl
			// overflowing into the past.
			writeError(w, http.StatusBadRequest, fmt.Sprintf(`"ttl": %q is longer than %s; leave "ttl" out for a state without an end`, body.TTL, maxTTL))
			return
		}
		if s == peers.Enabled {
			writeError(w, http.StatusBadRequest, `"ttl" needs an admin_state of drain or maintenance: it says when that ends`)
			return
		}
	}
	if len(body.Reason) > 512 {
		writeError(w, http.StatusBadRequest, `"reason" is longer than 512 bytes`)
		return
	}
	name := mux.Vars(r)["name"]
	p, from, err := a.reg.SetAdmin(name, s, body.Reason, ttl)
	if err != nil {
		writeError(w, http.StatusNotFound, err.Error())
		return
	}
	a.record(r, name, from.String(), s.String(), body.Reason)
	writeJSON(w, http.StatusOK, a.viewOf(p.Health().Snapshot()))
}

func (a *API) doReload(w http.ResponseWriter, r *http.Request) {
	if a.reload == nil {
		writeError(w, http.StatusNotImplemented, "reload is not available")
		return
	}
	diff, err := a.reload()
	if err != nil {
		writeError(w, http.StatusBadRequest, "reload refused: "+err.Error())
		return
	}
	a.record(r, "", "", "", "reload")
	diff.Status = "reloaded"
	writeJSON(w, http.StatusOK, diff)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
