package cli

// This file holds peerd status: the peers' table from a running peerd's
// admin API.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/peerd/peerd/internal/conf"
	"github.com/peerd/peerd/selection"
)

// peerd status [-admin URL]: the peers as a table on a terminal.

type statusPeer struct {
	Name                string           `json:"name"`
	Type                string           `json:"type"`
	Host                string           `json:"host"`
	Port                int              `json:"port"`
	State               string           `json:"state"`
	AdminState          string           `json:"admin_state"`
	AdminReason         *string          `json:"admin_reason"`
	AdminUntil          *time.Time       `json:"admin_until"`
	Suspect             bool             `json:"suspect"`
	Flapping            bool             `json:"flapping"`
	ConsecutiveFailures int64            `json:"consecutive_failures"`
	RequestsTotal       int64            `json:"requests_total"`
	InFlight            int64            `json:"in_flight"`
	DeathsTotal         int64            `json:"deaths_total"`
	ConnectTimeMs       float64          `json:"connect_time_ms"`
	DeadSince           *time.Time       `json:"dead_since"`
	LastError           *string          `json:"last_error"`
	FailuresByClass     map[string]int64 `json:"failures_by_class"`
	DeadCause           *string          `json:"dead_cause"`
	Outlier             bool             `json:"outlier"`
	LatencyShare        *float64         `json:"latency_share"`
	NoNextHop           bool             `json:"no_next_hop"`
	Unreachable         []struct {
		Destination string    `json:"destination"`
		Since       time.Time `json:"since"`
		Cause       string    `json:"cause"`
	} `json:"unreachable"`
}

func Status(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := newAdminFlags("status", "", stdout, stderr, false)
	if _, code, ok := a.parse(args, 0); !ok {
		return code
	}
	c, err := a.client()
	if err != nil {
		return done("status", err, stderr)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raw, err := c.Peers(ctx)
	if err != nil {
		return done("status", err, stderr)
	}
	ps := make([]statusPeer, len(raw))
	for i, r := range raw {
		if err := json.Unmarshal(r, &ps[i]); err != nil {
			fmt.Fprintf(stderr, "peerd status: %s/peers: %v\n", c.Base, err)
			return exitRuntime
		}
	}
	printStatus(stdout, ps, isTerminal(stdout), time.Now())
	return exitOK
}

// transition is one entry of a peer's history.
type transition struct {
	At    time.Time `json:"at"`
	From  string    `json:"from"`
	To    string    `json:"to"`
	Cause string    `json:"cause"`
	Error string    `json:"error"`
}

// printPeer writes one peer's state, counters and recent transitions.
func printPeer(w io.Writer, p statusPeer, hist []transition, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	state := p.State
	if p.State == "alive" && p.Suspect {
		state = "alive, suspect"
	}
	if p.DeadCause != nil {
		state += " (" + *p.DeadCause + ")"
	}
	if p.NoNextHop {
		state += ", no next hop of its own (sent nothing)"
	}
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, conf.Printable(v)) }
	row("peer", p.Name)
	row("address", fmt.Sprintf("%s:%d (%s)", p.Host, p.Port, p.Type))
	row("state", state)
	row("admin state", p.AdminState+adminNote(p, now))
	if p.DeadSince != nil {
		row("dead for", now.Sub(*p.DeadSince).Round(time.Second).String())
	}
	row("failures", fmt.Sprintf("%d in a row, %d deaths", p.ConsecutiveFailures, p.DeathsTotal))
	if p.ConnectTimeMs > 0 {
		row("connect time", fmt.Sprintf("%.1f ms", p.ConnectTimeMs))
	}
	row("requests", fmt.Sprintf("%d, %d in flight", p.RequestsTotal, p.InFlight))
	if p.LastError != nil {
		row("last error", *p.LastError)
	}
	for i, d := range p.Unreachable {
		k := ""
		if i == 0 {
			k = "cannot reach"
		}
		row(k, fmt.Sprintf("%s since %s (%s ago): %s", d.Destination, d.Since.Local().Format("15:04:05"), now.Sub(d.Since).Round(time.Second), d.Cause))
	}
	tw.Flush()
	if len(hist) == 0 {
		return
	}
	fmt.Fprintln(w, "\nhistory (newest last):")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, h := range hist {
		fmt.Fprintf(tw, "  %s\t%s -> %s\t%s\t%s\n", h.At.Local().Format("2006-01-02 15:04:05"), conf.Printable(h.From), conf.Printable(h.To), conf.Printable(h.Cause), conf.Printable(h.Error))
	}
	tw.Flush()
}

// printPlan writes an explained plan: the hops in order and the peers
// left out, or the refusal.
func printPlan(w io.Writer, e selection.Explanation, owner *string) {
	if e.Denied != "" {
		fmt.Fprintf(w, "refused: %s\n", conf.Printable(e.Denied))
		return
	}
	if owner != nil {
		fmt.Fprintf(w, "owner: %s\n", conf.Printable(*owner))
	}
	if len(e.ICP) > 0 {
		fmt.Fprintf(w, "ICP asks first: %s\n", conf.Printable(strings.Join(e.ICP, ", ")))
	}
	if len(e.Hops) == 0 {
		fmt.Fprintln(w, "no next hop: the request would be answered 503 no-peers")
	}
	for i, h := range e.Hops {
		fmt.Fprintf(w, "%d. %s (%s, tier %d): %s\n", i+1, conf.Printable(h.Peer), conf.Printable(h.Type), h.Tier, conf.Printable(h.Why))
	}
	for _, s := range e.Skipped {
		fmt.Fprintf(w, "   skipped %s: %s\n", conf.Printable(s.Peer), conf.Printable(s.Why))
	}
}

// isTerminal reports a character device (a TTY) that did not opt out of
// colour (NO_COLOR).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("NO_COLOR") != "" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

const (
	red    = "\x1b[31m"
	green  = "\x1b[32m"
	yellow = "\x1b[33m"
	reset  = "\x1b[0m"
)

func printStatus(w io.Writer, ps []statusPeer, colour bool, now time.Time) {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	colours := make([]string, len(ps))
	states := make([]string, len(ps))
	fmt.Fprintln(tw, "PEER\tTYPE\tADDRESS\tSTATE\tADMIN\tFAILS\tCONNECT\tREQUESTS\tIN FLIGHT\tDEATHS\tNOTE")
	for i, p := range ps {
		state := p.State
		switch {
		case p.State == "alive" && p.Suspect && p.Outlier:
			state = "suspect (outlier)"
		case p.State == "alive" && p.Suspect:
			state = "suspect"
		case p.State == "dead":
			if p.DeadCause != nil {
				state += " (" + conf.Printable(*p.DeadCause) + ")"
			}
			if p.Flapping {
				state += " (flapping)"
			}
		}
		c := green
		switch {
		case p.State == "dead":
			c = red
		case p.State != "alive" || p.Suspect:
			c = yellow
		}
		colours[i], states[i] = c, state
		adminState := p.AdminState
		if p.AdminUntil != nil {
			adminState += " " + p.AdminUntil.Sub(now).Round(time.Second).String()
		}
		var note []string
		if p.AdminReason != nil {
			note = append(note, *p.AdminReason)
		}
		if p.DeadSince != nil {
			note = append(note, "dead for "+now.Sub(*p.DeadSince).Round(time.Second).String())
		}
		if p.LastError != nil && p.State != "alive" {
			note = append(note, *p.LastError)
		}
		if p.LatencyShare != nil && *p.LatencyShare < 1 {
			note = append(note, fmt.Sprintf("latency share %.2f", *p.LatencyShare))
		}
		connect := "-"
		if p.ConnectTimeMs > 0 {
			connect = fmt.Sprintf("%.1fms", p.ConnectTimeMs)
		}
		// What another peerd sends is printed without its control
		// characters: a terminal must not take a name for an escape.
		fmt.Fprintf(tw, "%s\t%s\t%s:%d\t%s\t%s\t%d\t%s\t%d\t%d\t%d\t%s\n", conf.Printable(p.Name), conf.Printable(p.Type), conf.Printable(p.Host), p.Port,
			conf.Printable(state), conf.Printable(adminState), p.ConsecutiveFailures, connect, p.RequestsTotal, p.InFlight, p.DeathsTotal, conf.Printable(strings.Join(note, "; ")))
	}
	tw.Flush()
	if !colour {
		w.Write(buf.Bytes())
		return
	}
	// Colour the state column once the columns are laid out (tabwriter
	// would count the escape bytes as width).
	lines := strings.SplitAfter(buf.String(), "\n")
	col := strings.Index(lines[0], "STATE")
	for i := range ps {
		l := lines[i+1]
		if col >= 0 && strings.HasPrefix(l[min(col, len(l)):], states[i]) {
			l = l[:col] + colours[i] + states[i] + reset + l[col+len(states[i]):]
		}
		lines[i+1] = l
	}
	io.WriteString(w, strings.Join(lines, ""))
}
