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
// entry in the Makefile's FUZZ_TARGETS fails here, naming the entry to add.
func TestMakeFuzzRunsEveryTarget(t *testing.T) {
	mk, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	// Entries such as "cache:FuzzRange", one per line of FUZZ_TARGETS.
	entry := regexp.MustCompile(`(?m)^\t([\w/]+):(Fuzz\w+)( \\)?$`)
	listed := map[string]bool{}
	for _, m := range entry.FindAllStringSubmatch(string(mk), -1) {
		listed[m[1]+"."+m[2]] = true
	}
	if len(listed) == 0 {
		t.Fatal("no FUZZ_TARGETS entry found in the Makefile")
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
				t.Errorf("%s (%s) is not in make fuzz: add %s:%s to FUZZ_TARGETS", m[1], path, dir, m[1])
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
