// Command peerd is a forward HTTP proxy for Squid-style cache hierarchies
// that manages the health of its parent and sibling peers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"time"

	"github.com/peerd/peerd/cmd/peerd/internal/config"
	"github.com/peerd/peerd/peers"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

// Exit codes of contract section 2.
const (
	exitOK      = 0
	exitConfig  = 1
	exitRuntime = 2
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if c, rest, ok := subcommandOf(args); ok {
		return c.run(ctx, rest, stdout, stderr)
	}
	fs := flag.NewFlagSet("peerd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // -h prints the list once, to stdout, below; an error names the flag alone
	path := fs.String("config", "", "TOML config `file` (default: the embedded default, a direct proxy on 127.0.0.1:3128)")
	check := fs.Bool("check", false, "validate the config, print every problem, exit 0 if valid and 1 if not")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout) // asked for: the list goes to stdout, and it is no error
			usage(stdout)
			return exitOK
		}
		fmt.Fprintln(stderr, "peerd -h lists the flags and commands")
		return exitConfig
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "peerd: unknown command %q (peerd help lists them)\n", fs.Arg(0))
		return exitConfig
	}
	if *showVersion {
		fmt.Fprintf(stdout, "peerd %s\n", version)
		return exitOK
	}
	cfg, ps := config.Load(*path)
	if len(ps) > 0 {
		name := *path
		if name == "" {
			name = "(embedded default)"
		}
		for _, p := range ps {
			fmt.Fprintf(stderr, "peerd: %s: %s\n", name, p)
		}
		return exitConfig
	}
	if *check {
		for _, w := range cfg.Warnings() {
			fmt.Fprintf(stderr, "peerd: %s: warning: %s\n", displayPath(*path), w)
		}
		fmt.Fprintf(stdout, "peerd: config %s is valid (%d peers)\n", displayPath(*path), len(cfg.Peers))
		return exitOK
	}
	s, err := newServer(*path, cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "peerd: %v\n", err)
		return exitRuntime
	}
	if stop := cpuProfile(stderr); stop != nil {
		defer stop()
	}
	if err := s.serve(ctx); err != nil {
		fmt.Fprintf(stderr, "peerd: %v\n", err)
		return exitRuntime
	}
	return exitOK
}

// cpuProfile starts a CPU profile into $PEERD_CPUPROFILE, for the bench's
// profiles (make bench -cpuprofile); it returns what stops it, or nil.
func cpuProfile(stderr io.Writer) func() {
	path := os.Getenv("PEERD_CPUPROFILE")
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(stderr, "peerd: PEERD_CPUPROFILE: %v\n", err)
		return nil
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

func displayPath(p string) string {
	if p == "" {
		return "(embedded default)"
	}
	return p
}

// verdictWait is how long start-up waits for first probe verdicts: the
// longest probe timeout of any peer.
func verdictWait(reg *peers.Registry) time.Duration {
	var d time.Duration
	for _, p := range reg.Peers() {
		d = max(d, p.ProbeTimeout())
	}
	return d
}
