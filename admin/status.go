package admin

// This file holds the status page: the peers, their recent transitions and
// the cache, as HTML.

import (
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/peerd/peerd/fleet"
	"github.com/peerd/peerd/peers"
)

// GET /: the status page. Server-rendered with html/template from embedded
// assets, nothing fetched from elsewhere; it refreshes itself with a meta
// tag, so it works without JavaScript.

var (
	//go:embed assets/status.html
	statusHTML string
	//go:embed assets/status.css
	statusCSS  string
	statusPage = template.Must(template.New("status").Parse(statusHTML))
)

type statusRow struct {
	Name, Type, Address, State, StateClass, Admin, AdminNote string
	Fails, Requests, InFlight, Deaths                        int64
	Connect, Classes, LastError, LastErrorAt                 string
	Weight                                                   int
	// DeadFor and NextProbe are how long it has been dead and when it is
	// probed next ("" when alive, or none is planned).
	DeadFor, NextProbe string
	// Share is a parent's latency share ("1.00" normal; "" for others).
	Share string
	// Unreachable is the destinations a parent said it cannot reach,
	// with since when ("" for none; the first few, then how many more).
	Unreachable string
	Charts      []template.HTML
}

type statusTransition struct {
	At, Peer, From, To, Cause, Error string
}

type statusData struct {
	Name, Version, Now string
	// Policy, Uptime and Reload: the selection policy in force, how long
	// the process has served, and the last reload's result.
	Policy, Uptime, Reload string
	CSS                    template.CSS
	Refresh                int
	Alive, Dead, Other     int
	Peers                  []statusRow
	Transitions            []statusTransition
	Cache                  string
	Disk                   string // the disk tier; "" without one
	// Fleet is the members and, with shared_cache, each one's share of
	// the keys and this member's owner counters; "" without a fleet.
	Fleet, Owners string
}

func (a *API) statusPage(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path))
		return
	}
	now := time.Now()
	d := statusData{Name: a.name, Version: a.version, Now: now.UTC().Format("2006-01-02 15:04:05 UTC"), CSS: template.CSS(statusCSS), Refresh: 5}
	if a.facts != nil {
		f := a.facts()
		d.Policy = f.Policy
		if !f.Started.IsZero() {
			d.Uptime = roundAge(now.Sub(f.Started))
		}
		if !f.ReloadAt.IsZero() {
			d.Reload = "last config load " + f.ReloadAt.UTC().Format("15:04:05") + ": "
			if f.ReloadOK {
				d.Reload += "taken"
			} else {
				d.Reload += "refused (the running config kept)"
			}
		}
	}
	var ts []statusTransition
	type stamped struct {
		at time.Time
		t  statusTransition
	}
	var all []stamped
	for _, s := range a.reg.List(peers.Filter{}) {
		p := s.Peer
		row := statusRow{
			Name: p.Name(), Type: p.Type().String(), Address: p.Addr(), State: s.State.String(), StateClass: s.State.String(),
			Admin: s.Admin.String(), Fails: s.ConsecutiveFailures, Requests: s.RequestsTotal, InFlight: s.InFlight, Deaths: s.DeathsTotal,
			Connect: "-", LastError: s.LastError, Weight: p.Weight(),
			Charts: peerCharts(p, now),
		}
		if s.LastError != "" && !s.LastFailure.IsZero() {
			row.LastErrorAt = s.LastFailure.UTC().Format("15:04:05") + " (" + roundAge(now.Sub(s.LastFailure)) + " ago)"
		}
		if s.State == peers.Dead && !s.DeadSince.IsZero() {
			row.DeadFor = roundAge(now.Sub(s.DeadSince))
		}
		if !s.NextProbe.IsZero() && s.State != peers.Alive {
			row.NextProbe = roundAge(max(s.NextProbe.Sub(now), 0))
		}
		switch {
		case s.State == peers.Alive && s.Suspect && s.Outlier:
			row.State, row.StateClass = "suspect (outlier)", "suspect"
		case s.State == peers.Alive && s.NoNextHop:
			row.State, row.StateClass = "no next hop", "suspect"
		case s.State == peers.Alive && s.Suspect:
			row.State, row.StateClass = "suspect", "suspect"
		case s.State == peers.Dead:
			row.State += " (" + s.DeadCause + ")"
			if s.Flapping {
				row.State += " (flapping)"
			}
		}
		switch s.State {
		case peers.Alive:
			d.Alive++
		case peers.Dead:
			d.Dead++
		default:
			d.Other++
		}
		if s.ConnectTime > 0 {
			row.Connect = fmt.Sprintf("%.1f ms", float64(s.ConnectTime)/float64(time.Millisecond))
		}
		if p.Type() == peers.Parent && s.State == peers.Alive && s.RecentHeadMs > 0 {
			// A dead or idle parent has no recent times to be judged by:
			// a share beside it would be a number about nothing.
			row.Share = fmt.Sprintf("%.2f", s.LatencyShare)
		}
		var notes []string
		if s.AdminReason != "" {
			notes = append(notes, s.AdminReason)
		}
		if !s.AdminUntil.IsZero() {
			notes = append(notes, "until "+s.AdminUntil.UTC().Format("15:04:05"))
		}
		row.AdminNote = strings.Join(notes, ", ")
		var classes []string
		fc := s.FailuresByClass
		for _, k := range peers.FailureClassNames {
			if fc[k] > 0 {
				classes = append(classes, fmt.Sprintf("%s %d", k, fc[k]))
			}
		}
		row.Classes = strings.Join(classes, ", ")
		row.Unreachable = unreachableNote(s.Unreachable, now)
		d.Peers = append(d.Peers, row)
		for _, h := range p.Health().History() {
			all = append(all, stamped{h.At, statusTransition{At: h.At.UTC().Format("15:04:05"), Peer: p.Name(), From: h.From, To: h.To, Cause: h.Cause, Error: h.Error}})
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].at.After(all[j].at) })
	for i := 0; i < len(all) && i < 20; i++ {
		ts = append(ts, all[i].t)
	}
	d.Transitions = ts
	if c := a.cache(); c != nil {
		st := c.Stats()
		d.Cache = fmt.Sprintf("%d objects, %.1f of %.0f MiB, hit ratio %.1f%% (%d hits, %d misses, %d collapsed, %d stale served)",
			st.Objects, float64(st.Bytes)/(1<<20), float64(st.Memory)/(1<<20), 100*st.HitRatio, st.Hits, st.Misses, st.Collapsed, st.StaleServed)
		if st.DiskSize > 0 {
			d.Disk = fmt.Sprintf("disk: %d objects, %.1f of %.0f MiB, %d disk hits, %d disk errors", st.DiskObjects,
				float64(st.DiskBytes)/(1<<20), float64(st.DiskSize)/(1<<20), st.DiskHits, st.DiskErrors)
			if st.IndexLoading {
				d.Disk += fmt.Sprintf("; index loading (%d objects so far)", st.IndexObjectsLoaded)
			}
		}
	}
	if a.fleet != nil {
		d.Fleet, d.Owners = fleetLines(a.fleet)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	if err := statusPage.Execute(w, d); err != nil {
		a.log.WithError(err).Warn("status page")
	}
}

// fleetLines describes the fleet for the status page: its members, and
// with shared_cache each one's share of 1,000 sample keys and this
// member's owner counters.
func fleetLines(f *fleet.Fleet) (members, owners string) {
	st := f.Status()
	if !st.Enabled {
		return "", ""
	}
	names := make([]string, 0, len(st.Members))
	for _, m := range st.Members {
		names = append(names, m.Node+" ("+m.State+")")
	}
	members = fmt.Sprintf("this member %s; %d members: %s; purges made %d, applied %d",
		st.Node, len(st.Members), strings.Join(names, ", "), st.Purges.Made, st.Purges.Applied)
	if !st.SharedCache {
		return members, ""
	}
	share := map[string]int{}
	const n = 1000
	for i := 0; i < n; i++ {
		if node, _, _, ok := f.Owner(fmt.Appendf(nil, "http://sample.invalid/%d", i)); ok {
			share[node]++
		}
	}
	var parts []string
	for _, m := range st.Members {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", m.Node, 100*float64(share[m.Node])/n))
	}
	c := st.OwnerCounts
	owners = fmt.Sprintf("shared cache: owner share %s; asked of owners: %d hit, %d miss, %d failed; answered as owner %d (fetched %d); hot copies kept %d",
		strings.Join(parts, ", "), c.Asked["hit"], c.Asked["miss"], c.Asked["failed"], c.Served, c.Fetched, c.Hot)
	return members, owners
}

// unreachableNote is the destinations a parent cannot reach, for the
// status page: the five newest with how long, then how many more.
func unreachableNote(ds []peers.Dest, now time.Time) string {
	if len(ds) == 0 {
		return ""
	}
	var parts []string
	for i := len(ds) - 1; i >= 0 && len(parts) < 5; i-- {
		parts = append(parts, ds[i].Destination+" for "+roundAge(now.Sub(ds[i].Since)))
	}
	if more := len(ds) - len(parts); more > 0 {
		parts = append(parts, fmt.Sprintf("and %d more", more))
	}
	return "cannot reach " + strings.Join(parts, ", ")
}
