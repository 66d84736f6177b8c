package peerd_test

// This file holds the check that `make fuzz` runs every fuzz target.

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMakeFuzzRunsEveryTarget: the README promises that `make fuzz` runs
// every fuzz target, so a Fuzz function added to a test file without its
// line in the Makefile fails here, naming the line to add.
func TestMakeFuzzRunsEveryTarget(t *testing.T) {
	mk, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	// A line such as: $(GO) test -run XXX -fuzz '^FuzzRange$$' ... ./cache/
	line := regexp.MustCompile(`-fuzz '?\^?(Fuzz\w+)\$?\$?'?\s.*\s\./(\S*?)/?\s*$`)
	listed := map[string]bool{}
	for _, l := range strings.Split(string(mk), "\n") {
		if m := line.FindStringSubmatch(l); m != nil {
			listed[m[2]+"."+m[1]] = true
		}
	}
	if len(listed) == 0 {
		t.Fatal("no -fuzz line found in the Makefile")
	}
	decl := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(\w+ \*testing\.F\)`)
	found := 0
	err = filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		for _, m := range decl.FindAllStringSubmatch(string(src), -1) {
			found++
			if !listed[dir+"."+m[1]] {
				t.Errorf("%s (%s) is not in make fuzz: add\n\t$(GO) test -run XXX -fuzz '^%s$$' -fuzztime $(FUZZTIME) ./%s/", m[1], path, m[1], dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no fuzz target found: the walk is broken")
	}
}
