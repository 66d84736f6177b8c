package admin

// This file holds GET /cache and DELETE /cache?url= (the purge of one URL).

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/peerd/peerd/cache"
)

// GET /cache: what the HTTP cache holds and how it is used.
func (a *API) cacheStats(w http.ResponseWriter, _ *http.Request) {
	c := a.cache()
	if c == nil {
		writeJSON(w, http.StatusOK, cache.Stats{})
		return
	}
	writeJSON(w, http.StatusOK, c.Stats())
}

// DELETE /cache?url=URL: purge one URL, every Vary variant of it.
func (a *API) purgeCache(w http.ResponseWriter, r *http.Request) {
	raw := r.URL.Query().Get("url")
	if raw == "" {
		writeError(w, http.StatusBadRequest, "missing url parameter: DELETE /cache?url=http://host/path")
		return
	}
	key, err := cacheKey(raw)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	n := 0
	if c := a.cache(); c != nil {
		n = c.Purge(key)
	}
	out := map[string]any{"purged": n}
	if a.fleet != nil {
		// Every live member too, acknowledged (contract section 20).
		if res, ok := a.fleet.Purge(key, fleetPurgeWait); ok {
			out["acknowledged"], out["missing"] = res.Acknowledged, res.Missing
		}
	}
	a.record(r, "", "", "", fmt.Sprintf("purge %s: %d", raw, n))
	writeJSON(w, http.StatusOK, out)
}

// fleetPurgeWait is how long a purge waits for the other members'
// acknowledgements; the ones that did not answer are listed as missing
// (they get the purge when they rejoin, within purge_log).
const fleetPurgeWait = 2 * time.Second

// cacheKey turns an absolute http(s) URL into the cache's key, with the
// path and query as written (the key of a request for that URL).
func cacheKey(raw string) ([]byte, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return nil, fmt.Errorf("url %q is not an absolute http or https URL", raw)
	}
	rest := raw[strings.Index(raw, "://")+3:]
	pathQuery := ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		pathQuery = rest[i:]
	}
	if i := strings.IndexByte(pathQuery, '#'); i >= 0 {
		pathQuery = pathQuery[:i]
	}
	if strings.HasPrefix(pathQuery, "?") {
		pathQuery = "/" + pathQuery
	}
	return cache.AppendKey(nil, []byte(u.Scheme), []byte(u.Hostname()), []byte(u.Port()), []byte(pathQuery)), nil
}
