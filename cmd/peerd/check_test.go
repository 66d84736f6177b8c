package main

// These tests run peerd -check as an operator would, through run.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestCheckPrintsEveryProblem(t *testing.T) {
	path := t.TempDir() + "/bad.toml"
	os.WriteFile(path, []byte("[proxy]\nconect_timeout = \"1s\"\n[health]\nconnect_fail_limit = 0\n[[peer]]\nport = 70000\n"), 0o644)
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"-check", "-config", path}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d; want 1", code)
	}
	lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
	if len(lines) != 4 { // unknown key, fail limit, host, port
		t.Fatalf("got %d Problems; want 4:\n%s", len(lines), errOut.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"-check", "-config", "../../etc/peerd.toml"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d for etc/peerd.toml; want 0", code)
	}
	if code := run(context.Background(), []string{"-check", "-config", "/nonexistent.toml"}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d for a missing file; want 1", code)
	}
}

// TestCheckFileOrder: five mistakes of different kinds (decode errors and
// validation errors, in sections and in [[peer]] tables) are all printed,
// in line order, and identically on every run.
func TestCheckFileOrder(t *testing.T) {
	src := `[proxy]
connect_timeout = "5 parsecs"
forward_max_tries = 0
[selection]
policy = "random"
[[peer]]
host = "a"
[[peer]]
host = "b"
port = 70000
[health]
probe_interval = "0s"
`
	path := t.TempDir() + "/five.toml"
	os.WriteFile(path, []byte(src), 0o644)
	var first string
	for run := 0; run < 5; run++ {
		var out, errOut bytes.Buffer
		if code := runMain([]string{"-check", "-config", path}, &out, &errOut); code != 1 {
			t.Fatalf("exit %d; want 1", code)
		}
		if run == 0 {
			first = errOut.String()
			continue
		}
		if errOut.String() != first {
			t.Fatalf("run %d printed\n%s\nbut run 0 printed\n%s", run, errOut.String(), first)
		}
	}
	var lines []int
	for _, l := range strings.Split(strings.TrimSpace(first), "\n") {
		var n int
		if _, err := fmt.Sscanf(l[strings.Index(l, "line "):], "line %d:", &n); err != nil {
			t.Fatalf("no line number in %q", l)
		}
		lines = append(lines, n)
	}
	if fmt.Sprint(lines) != "[2 3 5 10 12]" {
		t.Fatalf("Problems on lines %v; want [2 3 5 10 12]:\n%s", lines, first)
	}
}

func runMain(args []string, stdout, stderr *bytes.Buffer) int {
	return run(context.Background(), args, stdout, stderr)
}

// TestCheckWarnsOnWeakToken: a valid config whose admin token is under
// 128 bits passes -check with a warning naming the key.
func TestCheckWarnsOnWeakToken(t *testing.T) {
	for token, weak := range map[string]bool{
		"secret": true, "0123456789abcdef0123456789abcde": true, // 124 bits of hex
		"0123456789abcdef0123456789abcdef": false, "q8Zp1xV3nR7tY2wK9mB4cH6j": false,
	} {
		path := t.TempDir() + "/t.toml"
		os.WriteFile(path, []byte("[admin]\ntoken = \""+token+"\"\n"), 0o644)
		var out, errOut bytes.Buffer
		if code := run(context.Background(), []string{"-check", "-config", path}, &out, &errOut); code != 0 {
			t.Fatalf("token %q: exit %d; want 0 (a warning is not an error)", token, code)
		}
		if got := strings.Contains(errOut.String(), "warning: admin.token"); got != weak {
			t.Errorf("token %q: warned %v; want %v (%s)", token, got, weak, errOut.String())
		}
	}
}
