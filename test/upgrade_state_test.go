package e2e

// Operator state across a binary upgrade and a restart (issue 64): a
// drain made a moment before SIGUSR2 is in force in the new process, with
// a state file (which the old one may not have written yet) and without
// one (the upgrade hands it over itself); a stop that loses admin
// overrides (no state file) says so.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestDrainJustBeforeUpgradeSurvives(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		state bool
	}{{"with a state file", true}, {"without a state file", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, b := newFakeParent(t, "a"), newFakeParent(t, "b")
			cfg := strings.Replace(upgradeConfig, `direct = "always"`, `direct = "allow"`, 1) + peerBlock("", a, b)
			if tc.state {
				cfg = withProxy(cfg, fmt.Sprintf("state_file = %q", filepath.Join(t.TempDir(), "state.json")))
			}
			u := startUpgradable(t, cfg)
			oldPID := u.cmd.Process.Pid
			admin := func(method, path, body string) (int, map[string]any) {
				t.Helper()
				req, _ := http.NewRequest(method, "http://"+u.admin+path, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer secret")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var v map[string]any
				json.NewDecoder(resp.Body).Decode(&v)
				return resp.StatusCode, v
			}
			if code, _ := admin("PUT", "/peers/a/state", `{"admin_state":"drain","reason":"rack move"}`); code != 200 {
				t.Fatalf("drain: %d", code)
			}
			// At once: well within the state file's half-second settling.
			copyFile(t, peerdBin, u.bin)
			if err := u.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
				t.Fatal(err)
			}
			select {
			case <-u.exited:
			case <-time.After(60 * time.Second):
				t.Fatal("the old process did not hand over and exit")
			}
			if pid := u.servingPID(); pid == oldPID || pid == 0 {
				t.Fatalf("pid file names %d (old %d)", pid, oldPID)
			}
			_, v := admin("GET", "/peers/a", "")
			if v["admin_state"] != "drain" || v["admin_reason"] != "rack move" {
				t.Fatalf("after the upgrade, a = admin_state %v reason %v; want the drain made before SIGUSR2", v["admin_state"], v["admin_reason"])
			}
			if !strings.Contains(u.logs(), "operator state taken over from the old process") {
				t.Fatal("the new process does not say it took the operator state over")
			}
			if !tc.state {
				// A stop with no state file loses the drain, and says so.
				syscall.Kill(u.servingPID(), syscall.SIGTERM)
				waitFor(t, "the warning that the drain ends with the process", 30*time.Second, func() bool {
					return strings.Contains(u.logs(), "operator state not kept") && strings.Contains(u.logs(), "a (drain)")
				})
			}
		})
	}
}
