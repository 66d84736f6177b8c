package peerd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDependencyDirection keeps the package graph acyclic and thin
// (internal/conf, the config problem type every Config shares, imports
// nothing and may be imported by all):
// peers imports no package of ours; probes and dialer only peers (and
// internal/stall, peerd's own stalls, which imports nothing);
// selection only peers (and internal/rendezvous, the weighted rendezvous
// hashing it shares with fleet, which imports nothing); forwarding peers, dialer, selection (types) and
// internal/h1 (framing), access (destination policy) and cache; cache
// only internal/h1 (it parses heads, it never dials) and
// internal/atomicfile (its journal); internal/h1 and
// access nothing of ours; admin only peers, selection (the types
// GET /plan renders) and cache (GET /cache);
// cmd/peerd/internal/config (decoding the TOML) may import the packages
// whose Config it fills, squidimport only config and what its output
// names, cli (the admin commands) only admin and the types it prints;
// they live under cmd/peerd, where nothing below can import them, so
// internal/ holds only the ground floor (TestInternalIsTheGroundFloor).
// Nothing imports cmd/peerd. Third-party libraries stay in their owners:
// go-memdb in peers, gorilla/mux in admin, memberlist in fleet, toml in
// config (and the CLI's [admin] reader).
func TestDependencyDirection(t *testing.T) {
	const mod = "github.com/peerd/peerd/"
	allowed := map[string][]string{
		"peers":                       {"internal/conf"},
		"dialer":                      {"peers", "internal/conf", "internal/stall"},
		"probes":                      {"peers", "dialer", "internal/conf", "internal/stall", "internal/nexthop", "internal/h1"},
		"selection":                   {"peers", "internal/match", "internal/conf", "internal/rendezvous"},
		"forwarding":                  {"peers", "dialer", "selection", "internal/h1", "internal/nexthop", "internal/match", "access", "cache", "auth", "internal/conf", "internal/atomicfile", "internal/stall", "internal/rendezvous", "tracing"},
		"tracing":                     {"internal/conf"},
		"auth":                        {"internal/conf"},
		"cache":                       {"internal/h1", "internal/conf", "internal/atomicfile"},
		"access":                      {"internal/conf"},
		"internal/h1":                 {},
		"internal/nexthop":            {"internal/h1"},
		"internal/conf":               {},
		"internal/atomicfile":         {},
		"internal/match":              {},
		"internal/procs":              {},
		"internal/stall":              {},
		"internal/rendezvous":         {},
		"cmd/peerd/internal/handover": {"internal/atomicfile"},
		"cmd/peerd/internal/statefile": {"peers", "internal/atomicfile", "internal/conf", "cmd/peerd/internal/config",
			"access", "admin", "auth", "cache", "dialer", "fleet", "forwarding", "icp", "selection", "tracing",
			"internal/h1", "internal/nexthop", "internal/match", "internal/stall", "internal/rendezvous"},
		"admin": {"peers", "selection", "internal/match", "cache", "fleet", "internal/h1", "internal/nexthop", "internal/conf", "internal/atomicfile", "internal/rendezvous"},
		// The fleet leads plans with a key's owner (fleet.Routing), whose
		// role reads its answers' heads (fleet.OwnerRole).
		"fleet": {"peers", "selection", "internal/h1", "internal/nexthop", "internal/match", "internal/conf", "internal/rendezvous"},
		"icp":   {"peers", "internal/conf"},
		"cmd/peerd/internal/squidimport": {"cmd/peerd/internal/config", "tracing", "cache", "forwarding", "internal/match", "internal/conf",
			"access", "admin", "auth", "fleet", "icp", "peers", "selection", "dialer", "internal/h1", "internal/nexthop", "internal/atomicfile", "internal/stall", "internal/rendezvous"},
		// The CLI reads [admin] itself: it links the admin client, not the
		// config decoder and the engine behind it (forwarding, dialer, ...).
		"cmd/peerd/internal/cli": {"admin", "selection", "internal/conf",
			"cache", "fleet", "peers", "internal/h1", "internal/nexthop", "internal/match", "internal/atomicfile", "internal/rendezvous"},
	}
	owners := map[string]string{
		"github.com/hashicorp/go-memdb":   "peers",
		"github.com/gorilla/mux":          "admin",
		"github.com/hashicorp/memberlist": "fleet",
		// The CLI decodes the [admin] table alone, so that a mistake
		// elsewhere in the file never stops status, reload or drain, and
		// without linking the engine that the config decoder does.
		"github.com/BurntSushi/toml": "cmd/peerd/internal/config cmd/peerd/internal/cli",
	}
	for pkg, ok := range allowed {
		out, err := exec.Command("go", "list", "-deps", "./"+pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			if rest, ours := strings.CutPrefix(dep, mod); ours {
				if rest == pkg {
					continue
				}
				if !contains(ok, rest) {
					t.Errorf("%s imports %s; allowed: %v", pkg, rest, ok)
				}
			}
		}
	}
	for _, pkg := range []string{"peers", "dialer", "probes", "selection", "forwarding", "admin", "fleet", "icp", "cmd/peerd", "cmd/peerd/internal/config", "cmd/peerd/internal/squidimport", "cmd/peerd/internal/cli"} {
		out, err := exec.Command("go", "list", "-f", "{{join .Imports \" \"}}", "./"+pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		for _, imp := range strings.Fields(string(out)) {
			if owner, ok := owners[imp]; ok && !slices.Contains(strings.Fields(owner), pkg) {
				t.Errorf("%s imports %s, which only %s may use", pkg, imp, owner)
			}
			if imp == mod+"cmd/peerd" {
				t.Errorf("%s imports cmd/peerd", pkg)
			}
		}
	}
}

// TestInternalIsTheGroundFloor: no package under internal/ imports one of
// the rooms above it (the config decoder, the importer, the CLI and the
// hand-over, which do, live under cmd/peerd/internal).
func TestInternalIsTheGroundFloor(t *testing.T) {
	const mod = "github.com/peerd/peerd/"
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./internal/...").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		for _, imp := range f[1:] {
			if rest, ours := strings.CutPrefix(imp, mod); ours && !strings.HasPrefix(rest, "internal/") {
				t.Errorf("%s imports %s: an arrow back up", strings.TrimPrefix(f[0], mod), rest)
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestNothingPointsOutside: the project documents itself; no file in the
// repository points to a place outside it (test data read at test time
// excepted: a test may name where it looks).
func TestNothingPointsOutside(t *testing.T) {
	out, err := exec.Command("git", "ls-files").Output()
	if err != nil {
		t.Skip("not a git checkout")
	}
	for _, f := range strings.Fields(string(out)) {
		if strings.HasSuffix(f, "_test.go") || strings.HasPrefix(f, ".ci/") || f == "Makefile" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, bad := range []string{"../shared", "shared/CONTRACT", "CONTRACT.md"} {
			if strings.Contains(string(b), bad) {
				t.Errorf("%s points outside the repository (%q)", f, bad)
			}
		}
	}
}

// TestFileShape: no non-test Go file is over 500 lines, and each opens
// with what it holds (a package doc, or a comment after the package
// clause).
func TestFileShape(t *testing.T) {
	out, err := exec.Command("git", "ls-files", "*.go").Output()
	if err != nil {
		t.Skip("not a git checkout")
	}
	for _, f := range strings.Fields(string(out)) {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		lines := strings.Split(string(b), "\n")
		if n := len(lines) - 1; n > 500 {
			t.Errorf("%s has %d lines; split it (at most 500)", f, n)
		}
		if !strings.HasPrefix(lines[0], "//") && (len(lines) < 3 || !strings.HasPrefix(lines[2], "//")) {
			t.Errorf("%s does not open with what it holds", f)
		}
	}
}

// TestArchitectureNamesExist: every Type.method or package.Function the
// architecture doc names in backquotes is in the code, so the walks it
// describes cannot drift from it unnoticed.
func TestArchitectureNamesExist(t *testing.T) {
	doc, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "ls-files", "*.go").Output()
	if err != nil {
		t.Skip("not a git checkout")
	}
	methods := map[string]bool{} // "Type.name" and "pkg.name"
	funcRe := regexp.MustCompile(`(?m)^func (?:\(\w+ \*?(\w+)(?:\[[^\]]*\])?\) )?(\w+)[\[(]`)
	for _, f := range strings.Fields(string(out)) {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pkg := filepath.Base(filepath.Dir(f))
		for _, m := range regexp.MustCompile(`(?m)^type (\w+)`).FindAllStringSubmatch(string(b), -1) {
			methods[pkg+"."+m[1]] = true
		}
		for _, m := range funcRe.FindAllStringSubmatch(string(b), -1) {
			if m[1] != "" {
				methods[m[1]+"."+m[2]] = true
			}
			methods[pkg+"."+m[2]] = true // a function, or a method of a type of pkg
		}
	}
	for _, m := range regexp.MustCompile("`([A-Za-z]\\w*)\\.([A-Za-z]\\w*)`").FindAllStringSubmatch(string(doc), -1) {
		if strings.HasSuffix(m[2], "go") || strings.HasSuffix(m[2], "md") || strings.HasSuffix(m[2], "toml") {
			continue // a file name
		}
		if !methods[m[1]+"."+m[2]] {
			t.Errorf("docs/architecture.md names %s.%s, which is not in the code", m[1], m[2])
		}
	}
}

// TestArchitectureTableNamesEveryPackage: docs/architecture.md's table of
// packages has a row for each one (five were missing).
func TestArchitectureTableNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "list", "./...").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		rel, ok := strings.CutPrefix(pkg, "github.com/peerd/peerd/")
		if !ok {
			continue // the root package: doc.go
		}
		if !strings.Contains(string(doc), "`"+rel+"/`") {
			t.Errorf("docs/architecture.md has no row for %s/", rel)
		}
	}
}
