package main

// This file holds the checks made over the whole run — I3 (a POST reached
// an origin at most once), I4 (a parent was marked dead, suspect or an
// outlier only after a fault of its own), I6 (descriptors and goroutines
// back to their baseline) — and the report: every violation with its
// seed, exchange and schedule, and a table of exchanges, faults injected
// and violations.

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
)

// report gathers a run's outcomes.
type report struct {
	seed  uint64
	start time.Time
	rec   *record

	mu         sync.Mutex
	byKind     [kinds]map[string]int // outcome counts per request kind
	violations []string
	byInv      map[string]int
	events     []string
	marks      int      // parent marks (dead, suspect, outlier) checked for I4
	spans      int      // request spans checked for I7
	resources  []string // each member's resources after the load (I6)
}

// maxListed bounds the violations printed in full.
const maxListed = 40

func (r *report) note(e exchange, v verdict, rec *record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byKind[e.kind] == nil {
		r.byKind[e.kind] = map[string]int{}
	}
	r.byKind[e.kind][v.outcome]++
	if v.outcome != "violation" {
		return
	}
	rec.mu.Lock()
	n := rec.arrivals[e.id]
	rec.mu.Unlock()
	var sched []string
	for i := 0; i < max(n, 1); i++ {
		sched = append(sched, faultFor(r.seed, e.id, i).String())
	}
	r.violate(v.invariant, fmt.Sprintf("seed %d exchange %d at %.1fs (%s %s, member %d, one-shot %v; schedule at the parents: %s, %d arrivals): %s",
		r.seed, e.id, time.Since(r.start).Seconds(), e.kind, e.path(), e.member, e.oneShot, strings.Join(sched, " then "), n, v.detail))
}

func (r *report) violate(inv, line string) {
	if r.byInv == nil {
		r.byInv = map[string]int{}
	}
	r.byInv[inv]++
	if len(r.violations) < maxListed {
		r.violations = append(r.violations, inv+": "+line)
	}
}

func (r *report) event(ev planned) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf("%5.1fs %s", ev.at.Seconds(), describe(ev)))
}

func describe(ev planned) string {
	switch ev.event {
	case killParent:
		return fmt.Sprintf("%s p%d for %v", ev.event, ev.target+1, ev.hold)
	case stallPeerd, killMember, stopMember:
		return fmt.Sprintf("%s for %v", ev.event, ev.hold)
	}
	return ev.event.String()
}

func (r *report) eventFailed(ev planned, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.violate("run", fmt.Sprintf("seed %d: %s at %.1fs failed: %v", r.seed, ev.event, ev.at.Seconds(), err))
}

// checkPosts: I3.
func (r *report) checkPosts() {
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, n := range r.rec.posts {
		if n > 1 {
			r.violate("I3", fmt.Sprintf("seed %d exchange %d: the POST reached the origin %d times", r.seed, id, n))
		}
	}
}

// blameWindow is how long before a mark a fault of the parent's own must
// have happened for the mark to be fair (suspicions are settled by
// probes within seconds; an outlier is judged over 10 s).
const blameWindow = 15 * time.Second

type transition struct {
	From, To, Cause, Error string
	At                     time.Time
}

// checkBlame: I4, from every member's history of every parent.
func (r *report) checkBlame(ms []*member, parents []*parent) {
	for _, m := range ms {
		for _, p := range parents {
			var h struct{ Transitions []transition }
			if err := m.adminJSON("/peers/"+p.name+"/history", &h); err != nil {
				r.mu.Lock()
				r.violate("run", fmt.Sprintf("seed %d: member %s: reading %s's history: %v", r.seed, m.name, p.name, err))
				r.mu.Unlock()
				continue
			}
			for _, t := range h.Transitions {
				marked := t.To == "dead" || t.To == "suspect" || t.Cause == "outlier"
				if !marked || t.From == "unknown" {
					continue
				}
				r.mu.Lock()
				r.marks++
				r.mu.Unlock()
				if r.rec.faultNear(p.name, t.At) {
					continue
				}
				r.mu.Lock()
				r.violate("I4", fmt.Sprintf("seed %d: member %s marked %s %s at %s (cause %s: %s) with no fault of its own in the %v before",
					r.seed, m.name, p.name, t.To, t.At.Format("15:04:05.000"), t.Cause, t.Error, blameWindow))
				r.mu.Unlock()
			}
		}
	}
}

// faultNear reports a fault of parent's own within blameWindow before at
// (or a moment after: clocks are read on two sides).
func (rec *record) faultNear(parent string, at time.Time) bool {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, t := range rec.faults[parent] {
		if !t.Before(at.Add(-blameWindow)) && !t.After(at.Add(time.Second)) {
			return true
		}
	}
	return false
}

// baseline is a member's resources before the load.
type baseline struct{ fds, goroutines int }

func baselines(ms []*member) []baseline {
	var out []baseline
	for _, m := range ms {
		f, _, g := m.resources()
		out = append(out, baseline{f, g})
	}
	return out
}

// Slack over the baseline once the load is over: a connection or two to
// the fleet's members and their goroutines may be new. The store's
// segment files are not counted (member.resources): their number grows
// with what was stored (a segment is a sixteenth of disk_size) and with
// each start of the process (an upgrade opens a new one), not with
// connections.
const fdSlack, goroutineSlack = 6, 20

// checkResources: I6, polled for up to 30s after the load (idle
// connections close after pconn_timeout).
func (r *report) checkResources(ms []*member, base []baseline) {
	for i, m := range ms {
		var f, segs, g int
		deadline := time.Now().Add(30 * time.Second)
		for {
			f, segs, g = m.resources()
			if f <= base[i].fds+fdSlack && g <= base[i].goroutines+goroutineSlack && f > 0 {
				r.mu.Lock()
				r.resources = append(r.resources, fmt.Sprintf("member %s: %d descriptors and %d goroutines, %d and %d before the load (and %d store segments open)",
					m.name, f, g, base[i].fds, base[i].goroutines, segs))
				r.mu.Unlock()
				break
			}
			if time.Now().After(deadline) {
				r.mu.Lock()
				r.violate("I6", fmt.Sprintf("seed %d: member %s holds %d descriptors and %d goroutines 30s after the load; %d and %d before it (its descriptors: %s)",
					r.seed, m.name, f, g, base[i].fds, base[i].goroutines, m.descriptorKinds()))
				r.mu.Unlock()
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

func (r *report) failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byInv) > 0
}

// print writes the events, the table and then the violations.
func (r *report) print(w io.Writer, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(w, "chaos: seed %d, %s\n\nevents:\n", r.seed, took.Round(time.Second))
	for _, e := range r.events {
		fmt.Fprintln(w, "  "+e)
	}
	outcomes := []string{"ok", "peerd_error", "relayed_error", "origin_cut", "violation"}
	fmt.Fprintf(w, "\n%-16s %8s", "exchanges", "total")
	for _, o := range outcomes {
		fmt.Fprintf(w, " %13s", o)
	}
	fmt.Fprintln(w)
	var sum [6]int
	for k := kind(0); k < kinds; k++ {
		t := 0
		for _, n := range r.byKind[k] {
			t += n
		}
		sum[0] += t
		fmt.Fprintf(w, "%-16s %8d", k, t)
		for i, o := range outcomes {
			fmt.Fprintf(w, " %13d", r.byKind[k][o])
			sum[i+1] += r.byKind[k][o]
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "%-16s %8d", "all", sum[0])
	for i := range outcomes {
		fmt.Fprintf(w, " %13d", sum[i+1])
	}
	fmt.Fprintln(w)
	r.rec.mu.Lock()
	fmt.Fprintf(w, "\nfaults injected at the parents:\n")
	for f := fault(0); f < faultKinds; f++ {
		fmt.Fprintf(w, "  %-22s %8d\n", f, r.rec.injected[f])
	}
	fmt.Fprintf(w, "\nexchanges sent on a connection or through a tunnel idle long enough to be parked: %d\n", r.rec.parked)
	r.rec.mu.Unlock()
	var invs []string
	for inv := range r.byInv {
		invs = append(invs, inv)
	}
	sort.Strings(invs)
	fmt.Fprintf(w, "\nparent marks (dead, suspect, outlier) checked against the faults: %d\n", r.marks)
	fmt.Fprintf(w, "request spans checked against their exchange's URL: %d\n", r.spans)
	for _, l := range r.resources {
		fmt.Fprintln(w, l)
	}
	// The violations come last, next to their count: a log cut to its
	// tail keeps them.
	if len(r.violations) > 0 {
		fmt.Fprintln(w)
	}
	for _, v := range r.violations {
		fmt.Fprintln(w, "VIOLATION", v)
	}
	total := 0
	for _, n := range r.byInv {
		total += n
	}
	fmt.Fprintf(w, "\n%d violations", total)
	for _, inv := range invs {
		fmt.Fprintf(w, " (%s: %d)", inv, r.byInv[inv])
	}
	fmt.Fprintln(w)
	passed, failed := 1, 0
	if len(r.byInv) > 0 {
		passed, failed = 0, 1
	}
	fmt.Fprintf(w, "chaos: %d passed, %d failed\n", passed, failed)
}
