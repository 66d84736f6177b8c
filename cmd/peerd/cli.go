package main

// This file holds the command line's subcommands: their list (peerd help),
// and the ones that drive a running peerd through its admin API (status,
// peers, peer, drain, maintenance, enable, probe, reload, purge, plan).
// They find the API and its token in the config file (or -admin and
// PEERD_ADMIN_TOKEN), and exit 0 when done, 1 when refused (the API's
// error printed) and 2 when the API could not be reached.

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/peerd/peerd/cmd/peerd/internal/cli"
	"github.com/peerd/peerd/cmd/peerd/internal/squidimport"
)

// subcommand is one word of the command line.
type subcommand struct {
	name, args, what string
	run              func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// subcommands in the order peerd help lists them.
func subcommands() []subcommand {
	return []subcommand{
		{"status", "", "the peers as a table: state, admin state, failures, connect time, requests", cli.Status},
		{"peers", "[-json]", "the peers (-json: as GET /peers answers)", cli.Peers},
		{"peer", "NAME [-json]", "one peer: state, counters and its recent transitions", cli.Peer},
		{"drain", "NAME [-reason R] [-ttl D]", "send NAME no new requests (in-flight ones finish)", cli.State("drain")},
		{"maintenance", "NAME [-reason R] [-ttl D]", "send NAME no requests and no probes", cli.State("maintenance")},
		{"enable", "NAME", "put NAME back in service", cli.State("enabled")},
		{"probe", "NAME", "probe NAME now and print its state", cli.Probe},
		{"reload", "", "re-read the config (as SIGHUP) and print what changed", cli.Reload},
		{"purge", "URL", "remove URL from the cache (every variant, both tiers)", cli.Purge},
		{"plan", "URL [-method M] [...]", "the next hops peerd would try for URL now, sending nothing", cli.Plan},
		{"import-squid", "FILE", "print the peerd config equivalent of a squid.conf", squidimport.Command},
		{"help", "", "this list", helpCommand},
	}
}

// globalFlags are the flags an admin command takes before its name as well
// as after it (peerd -config F status); each has a value.
var globalFlags = map[string]bool{"config": true, "admin": true}

// subcommandOf finds the subcommand args name, after any global flags,
// and the arguments it runs with: the global flags given before it go
// after its own.
func subcommandOf(args []string) (subcommand, []string, bool) {
	i := 0
	for i < len(args) && strings.HasPrefix(args[i], "-") && args[i] != "-" && args[i] != "--" {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !globalFlags[name] {
			return subcommand{}, nil, false
		}
		i++
		if !hasValue {
			i++
		}
	}
	if i >= len(args) {
		return subcommand{}, nil, false
	}
	for _, c := range subcommands() {
		if args[i] == c.name {
			rest := append(append([]string{}, args[i+1:]...), args[:i]...)
			return c, rest, true
		}
	}
	return subcommand{}, nil, false
}

// usage is peerd's own help: how to run it, and the subcommands.
func usage(w io.Writer) {
	fmt.Fprintf(w, `peerd %s: a forward caching proxy that manages the health of its parent proxies

Usage:
  peerd [-config FILE] [-check] [-version]    run the proxy (without -config, on the
                                              embedded default: 127.0.0.1:3128, admin 127.0.0.1:3180)
  peerd COMMAND [ARGS]                        drive a running peerd, or import a squid.conf

Commands:
`, version)
	for _, c := range subcommands() {
		fmt.Fprintf(w, "  %-12s %-26s %s\n", c.name, c.args, c.what)
	}
	fmt.Fprintf(w, `
The commands that drive a running peerd read its admin address and token
from -config FILE (default %s), or take -admin URL and the
PEERD_ADMIN_TOKEN environment variable. Each has -h.
Exit codes: 0 done, 1 refused (the error is printed), 2 peerd not reachable.
See peerd(8) and peerd.toml(5).
`, cli.DefaultConfigPath)
}

func helpCommand(_ context.Context, _ []string, stdout, _ io.Writer) int {
	usage(stdout)
	return exitOK
}
