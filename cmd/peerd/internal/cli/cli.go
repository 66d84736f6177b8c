// Package cli holds the subcommands that drive a running peerd through its
// admin API (status, peers, peer, drain, maintenance, enable, probe,
// reload, purge, plan). They find the API and its token in the config
// file (or -admin and PEERD_ADMIN_TOKEN), and exit 0 when done, 1 when
// refused (the API's error printed) and 2 when the API could not be
// reached. cmd/peerd lists and dispatches them.
package cli

// This file holds the flags every command shares, how the admin API is
// found, and the commands other than status.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/peerd/peerd/admin"
	"github.com/peerd/peerd/internal/conf"
	"github.com/peerd/peerd/selection"
)

// Exit codes of the contract's command line.
const (
	exitOK      = 0
	exitConfig  = 1
	exitRuntime = 2
)

// DefaultConfigPath is where the admin commands look for the config.
const DefaultConfigPath = "/etc/peerd/peerd.toml"

// adminFlags are the flags every admin command takes.
type adminFlags struct {
	fs     *flag.FlagSet
	stdout io.Writer // where -h prints
	config string
	addr   string
	json   bool
}

// newAdminFlags makes a command's flag set; jsonFlag adds -json.
func newAdminFlags(name, args string, stdout, stderr io.Writer, jsonFlag bool) *adminFlags {
	a := &adminFlags{fs: flag.NewFlagSet("peerd "+name, flag.ContinueOnError), stdout: stdout}
	a.fs.SetOutput(stderr)
	a.fs.StringVar(&a.config, "config", DefaultConfigPath, "the peerd config `file` to read the admin address and token from")
	a.fs.StringVar(&a.addr, "admin", "", "the admin API's `URL` (instead of the config's [admin] listen)")
	if jsonFlag {
		a.fs.BoolVar(&a.json, "json", false, "print the API's JSON answer")
	}
	a.fs.Usage = func() {
		fmt.Fprintf(a.fs.Output(), "Usage: peerd %s %s [-config FILE | -admin URL]\n", name, args)
		a.fs.PrintDefaults()
	}
	return a
}

// parse reads flags and positional arguments in any order; it returns
// the positional ones, or an exit code when parsing ended the command.
func (a *adminFlags) parse(args []string, want int) ([]string, int, bool) {
	for _, arg := range args {
		if arg == "-h" || arg == "-help" || arg == "--help" {
			a.fs.SetOutput(a.stdout) // asked for: to stdout, and no error
			a.fs.Usage()
			return nil, exitOK, false
		}
	}
	var pos []string
	for {
		if err := a.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, exitOK, false
			}
			return nil, exitConfig, false
		}
		if a.fs.NArg() == 0 {
			break
		}
		pos = append(pos, a.fs.Arg(0))
		args = a.fs.Args()[1:]
	}
	if len(pos) != want {
		a.fs.Usage()
		return nil, exitConfig, false
	}
	return pos, 0, true
}

// explicit reports whether -config was given (a missing default file is
// the embedded default; a missing named one is an error).
func (a *adminFlags) explicit() bool {
	set := false
	a.fs.Visit(func(f *flag.Flag) { set = set || f.Name == "config" })
	return set
}

// client is the admin client the flags and the config name.
func (a *adminFlags) client() (*admin.Client, error) {
	token := os.Getenv("PEERD_ADMIN_TOKEN")
	base := a.addr
	if base == "" || token == "" {
		listen, cfgToken, err := adminFromConfig(a.config, a.explicit())
		if err != nil && base == "" {
			return nil, err
		}
		if base == "" {
			base = "http://" + listen
		}
		if token == "" {
			token = cfgToken
		}
	}
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	return &admin.Client{Base: base, Token: token}, nil
}

// dialable turns a listen address into one to connect to: every address
// is reached on loopback.
func dialable(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}

// done maps an admin call's result to the exit code, printing the error.
func done(name string, err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "peerd %s: %v\n", name, err)
	var refused *admin.Refused
	var file *fileError
	if errors.As(err, &refused) || errors.As(err, &file) {
		return exitConfig
	}
	return exitRuntime
}

// callContext bounds an admin call.
func callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 30*time.Second)
}

// printJSON writes v indented.
func printJSON(w io.Writer, v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	fmt.Fprintf(w, "%s\n", b)
}

func Peers(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := newAdminFlags("peers", "", stdout, stderr, true)
	if _, code, ok := a.parse(args, 0); !ok {
		return code
	}
	c, err := a.client()
	if err != nil {
		return done("peers", err, stderr)
	}
	ctx, cancel := callContext(ctx)
	defer cancel()
	raw, err := c.Peers(ctx)
	if err != nil {
		return done("peers", err, stderr)
	}
	if a.json {
		printJSON(stdout, map[string]any{"peers": raw})
		return exitOK
	}
	ps := make([]statusPeer, len(raw))
	for i, r := range raw {
		json.Unmarshal(r, &ps[i])
	}
	printStatus(stdout, ps, isTerminal(stdout), time.Now())
	return exitOK
}

func Peer(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := newAdminFlags("peer", "NAME", stdout, stderr, true)
	pos, code, ok := a.parse(args, 1)
	if !ok {
		return code
	}
	c, err := a.client()
	if err != nil {
		return done("peer", err, stderr)
	}
	ctx, cancel := callContext(ctx)
	defer cancel()
	var raw json.RawMessage
	if err := c.Peer(ctx, pos[0], &raw); err != nil {
		return done("peer", err, stderr)
	}
	var hist struct {
		Transitions []transition `json:"transitions"`
	}
	if err := c.History(ctx, pos[0], &hist); err != nil {
		return done("peer", err, stderr)
	}
	if a.json {
		printJSON(stdout, map[string]any{"peer": raw, "history": hist})
		return exitOK
	}
	var p statusPeer
	json.Unmarshal(raw, &p)
	printPeer(stdout, p, hist.Transitions, time.Now())
	return exitOK
}

// State is drain, maintenance or enable.
func State(state string) func(context.Context, []string, io.Writer, io.Writer) int {
	name := map[string]string{"enabled": "enable"}[state]
	if name == "" {
		name = state
	}
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
		usageArgs := "NAME [-reason R] [-ttl D]"
		if state == "enabled" {
			usageArgs = "NAME"
		}
		a := newAdminFlags(name, usageArgs, stdout, stderr, false)
		var reason, ttl string
		if state != "enabled" {
			a.fs.StringVar(&reason, "reason", "", "why (shown in /peers, the audit log and peerd status)")
			a.fs.StringVar(&ttl, "ttl", "", "after this `duration` (e.g. 30m) the peer returns to enabled by itself")
		}
		pos, code, ok := a.parse(args, 1)
		if !ok {
			return code
		}
		c, err := a.client()
		if err != nil {
			return done(name, err, stderr)
		}
		ctx, cancel := callContext(ctx)
		defer cancel()
		var p statusPeer
		if err := c.SetState(ctx, pos[0], state, reason, ttl, &p); err != nil {
			return done(name, err, stderr)
		}
		fmt.Fprintf(stdout, "peer %s: %s%s\n", conf.Printable(p.Name), conf.Printable(p.AdminState), adminNote(p, time.Now()))
		return exitOK
	}
}

// adminNote is the reason and time left of an admin state.
func adminNote(p statusPeer, now time.Time) string {
	var parts []string
	if p.AdminReason != nil {
		parts = append(parts, "reason: "+conf.Printable(*p.AdminReason))
	}
	if p.AdminUntil != nil {
		parts = append(parts, "for "+p.AdminUntil.Sub(now).Round(time.Second).String())
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func Probe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := newAdminFlags("probe", "NAME", stdout, stderr, false)
	pos, code, ok := a.parse(args, 1)
	if !ok {
		return code
	}
	c, err := a.client()
	if err != nil {
		return done("probe", err, stderr)
	}
	ctx, cancel := callContext(ctx)
	defer cancel()
	var p statusPeer
	if err := c.Probe(ctx, pos[0], &p); err != nil {
		return done("probe", err, stderr)
	}
	note := ""
	if p.LastError != nil && p.State != "alive" {
		note = " (" + conf.Printable(*p.LastError) + ")"
	}
	fmt.Fprintf(stdout, "peer %s: %s%s\n", conf.Printable(p.Name), conf.Printable(p.State), note)
	return exitOK
}

func Reload(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := newAdminFlags("reload", "", stdout, stderr, true)
	if _, code, ok := a.parse(args, 0); !ok {
		return code
	}
	c, err := a.client()
	if err != nil {
		return done("reload", err, stderr)
	}
	ctx, cancel := callContext(ctx)
	defer cancel()
	var d admin.ReloadDiff
	if err := c.Reload(ctx, &d); err != nil {
		return done("reload", err, stderr)
	}
	if a.json {
		printJSON(stdout, d)
		return exitOK
	}
	fmt.Fprintln(stdout, "reloaded")
	for _, l := range []struct {
		what  string
		names []string
	}{{"added", d.Added}, {"removed", d.Removed}, {"settings changed", d.Settings}} {
		if len(l.names) > 0 {
			fmt.Fprintf(stdout, "  %s: %s\n", l.what, conf.Printable(strings.Join(l.names, ", ")))
		}
	}
	for _, ch := range d.Changed {
		fmt.Fprintf(stdout, "  peer %s changed: %s\n", conf.Printable(ch.Peer), conf.Printable(strings.Join(ch.Fields, ", ")))
	}
	return exitOK
}

func Purge(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := newAdminFlags("purge", "URL", stdout, stderr, true)
	pos, code, ok := a.parse(args, 1)
	if !ok {
		return code
	}
	c, err := a.client()
	if err != nil {
		return done("purge", err, stderr)
	}
	ctx, cancel := callContext(ctx)
	defer cancel()
	var out map[string]any
	if err := c.Purge(ctx, pos[0], &out); err != nil {
		return done("purge", err, stderr)
	}
	if a.json {
		printJSON(stdout, out)
		return exitOK
	}
	fmt.Fprintf(stdout, "purged %v stored response(s) of %s\n", out["purged"], conf.Printable(pos[0]))
	if acks, ok := out["acknowledged"].([]any); ok && len(acks) > 0 {
		names := make([]string, len(acks))
		for i, a := range acks {
			names[i] = conf.Printable(fmt.Sprint(a))
		}
		fmt.Fprintf(stdout, "acknowledged by %d member(s): %s\n", len(acks), strings.Join(names, ", "))
	}
	return exitOK
}

func Plan(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := newAdminFlags("plan", "URL [-method M] [-client IP] [-user U]", stdout, stderr, true)
	method := a.fs.String("method", "GET", "the request's `method`")
	client := a.fs.String("client", "", "the client `address` (default: the admin API's view)")
	user := a.fs.String("user", "", "the authenticated `user`, for [[rule]] and [[route]] users")
	pos, code, ok := a.parse(args, 1)
	if !ok {
		return code
	}
	c, err := a.client()
	if err != nil {
		return done("plan", err, stderr)
	}
	q := url.Values{"url": {pos[0]}, "method": {*method}}
	if *client != "" {
		q.Set("client", *client)
	}
	if *user != "" {
		q.Set("user", *user)
	}
	ctx, cancel := callContext(ctx)
	defer cancel()
	var e struct {
		selection.Explanation
		Owner *string `json:"owner"`
	}
	if err := c.Plan(ctx, q, &e); err != nil {
		return done("plan", err, stderr)
	}
	if a.json {
		printJSON(stdout, e)
		return exitOK
	}
	printPlan(stdout, e.Explanation, e.Owner)
	return exitOK
}
