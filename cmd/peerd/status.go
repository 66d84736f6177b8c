package main

// This file holds peerd status: the peers' table from a running peerd's
// admin API.

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/peerd/peerd/admin"
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
}

func statusCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("peerd status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("admin", "http://"+admin.DefaultConfig().Listen, "admin API `URL` of the peerd to ask")
	if err := fs.Parse(args); err != nil {
		return exitConfig
	}
	base := strings.TrimSuffix(*addr, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/peers", nil)
	if err != nil {
		fmt.Fprintf(stderr, "peerd status: %v\n", err)
		return exitConfig
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "peerd status: %s: %v\n", base, err)
		return exitRuntime
	}
	defer resp.Body.Close()
	var body struct {
		Peers []statusPeer `json:"peers"`
	}
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "peerd status: %s/peers: %s\n", base, resp.Status)
		return exitRuntime
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&body); err != nil {
		fmt.Fprintf(stderr, "peerd status: %s/peers: %v\n", base, err)
		return exitRuntime
	}
	printStatus(stdout, body.Peers, isTerminal(stdout), time.Now())
	return exitOK
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
		case p.State == "alive" && p.Suspect:
			state = "suspect"
		case p.State == "dead":
			if p.DeadCause != nil {
				state += " (" + commentText(*p.DeadCause) + ")"
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
		connect := "-"
		if p.ConnectTimeMs > 0 {
			connect = fmt.Sprintf("%.1fms", p.ConnectTimeMs)
		}
		// What another peerd sends is printed without its control
		// characters: a terminal must not take a name for an escape.
		fmt.Fprintf(tw, "%s\t%s\t%s:%d\t%s\t%s\t%d\t%s\t%d\t%d\t%d\t%s\n", commentText(p.Name), commentText(p.Type), commentText(p.Host), p.Port,
			commentText(state), commentText(adminState), p.ConsecutiveFailures, connect, p.RequestsTotal, p.InFlight, p.DeathsTotal, commentText(strings.Join(note, "; ")))
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
