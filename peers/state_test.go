package peers

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestStateRoundTrip: a drain with a ttl and a reason, history, flap
// state and learned times survive an export and an import into a fresh
// registry; the peer still starts unknown. A drain whose end passed, and
// a peer whose address changed, are not restored.
func TestStateRoundTrip(t *testing.T) {
	r := answersRegistry(t, 2, nil)
	now := time.Now() // the registry's own clock: a restored ttl runs on it
	until := now.Add(10 * time.Minute)
	if _, _, err := r.setAdmin("a", Drain, "kernel upgrade", until.UnixNano(), true); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		observeAnswer(r, r.Get("b"), AnswerOK, 40*time.Millisecond, t0)
	}
	b, err := json.Marshal(r.ExportState(now))
	if err != nil {
		t.Fatal(err)
	}
	st, err := ParseSavedState(b)
	if err != nil {
		t.Fatal(err)
	}
	fresh := answersRegistry(t, 2, nil)
	restored, skipped := fresh.ImportState(st, now.Add(time.Minute))
	if len(restored) != 2 || len(skipped) != 0 {
		t.Fatalf("restored %v skipped %v", restored, skipped)
	}
	a := fresh.Get("a")
	if a.Health().AdminState() != Drain || a.Health().Snapshot().AdminReason != "kernel upgrade" || !a.Health().Snapshot().AdminUntil.Equal(time.Unix(0, until.UnixNano())) {
		t.Fatalf("a: %v %q until %v; want drain, the reason and the same end", a.Health().AdminState(), a.Health().Snapshot().AdminReason, a.Health().Snapshot().AdminUntil)
	}
	found := false
	for _, e := range a.Health().History() {
		found = found || e.Cause == CauseAdmin && e.Error == "kernel upgrade"
	}
	if !found {
		t.Fatalf("history %+v; want the drain from before", a.Health().History())
	}
	if fresh.Get("b").Health().Snapshot().FirstByteMs != r.Get("b").Health().Snapshot().FirstByteMs {
		t.Fatal("learned head times not restored")
	}
	// Past its end: not restored.
	late := answersRegistry(t, 2, nil)
	late.ImportState(st, until.Add(time.Second))
	if late.Get("a").Health().AdminState() != Enabled {
		t.Fatal("a drain whose ttl ended before the restart was restored")
	}
	// Another address: a fresh peer.
	moved := answersRegistry(t, 1, nil)
	moved.Reconcile(*moved.opts.Load(), []Spec{{Name: "a", Host: "127.0.0.9", Port: 1000}})
	if _, skipped := moved.ImportState(st, t0); !strings.Contains(skipped["a"], "address changed") {
		t.Fatalf("skipped %v; want a skipped for its new address", skipped)
	}
}

// TestStateFileTruncated: every truncation of a state file, and a newer
// version, is refused with an error, never a panic or a half state.
func TestStateFileTruncated(t *testing.T) {
	r := answersRegistry(t, 2, nil)
	r.setAdmin("a", Maintenance, "x", t0.Add(time.Hour).UnixNano(), true)
	b, _ := json.MarshalIndent(r.ExportState(t0), "", " ")
	for i := 0; i < len(b); i++ {
		if _, err := ParseSavedState(b[:i]); err == nil {
			t.Fatalf("a state file cut at byte %d of %d was accepted", i, len(b))
		}
	}
	newer := strings.Replace(string(b), `"version": 1`, `"version": 2`, 1)
	if _, err := ParseSavedState([]byte(newer)); err == nil || !strings.Contains(err.Error(), "newer peerd") {
		t.Fatalf("a newer state file: %v; want it refused clearly", err)
	}
}

// TestImportAdminIsAuthoritative: a binary upgrade's hand-over puts the
// old process's admin state in force whatever the new one read from its
// file, "enabled" included (a drain undone after the file was written is
// undone here too); pick limits it to the peers that changed.
func TestImportAdminIsAuthoritative(t *testing.T) {
	old := answersRegistry(t, 2, nil)
	now := time.Now()
	if _, _, err := old.setAdmin("b", Drain, "rack move", 0, true); err != nil {
		t.Fatal(err)
	}
	st := old.ExportState(now)
	fresh := answersRegistry(t, 2, nil)
	if _, _, err := fresh.setAdmin("a", Maintenance, "from a stale file", 0, true); err != nil {
		t.Fatal(err)
	}
	changed := fresh.ImportAdmin(st, now, nil)
	if fresh.Get("a").Health().AdminState() != Enabled || fresh.Get("b").Health().AdminState() != Drain {
		t.Fatalf("a %v, b %v; want the old process's enabled and drain", fresh.Get("a").Health().AdminState(), fresh.Get("b").Health().AdminState())
	}
	if strings.Join(changed, ",") != "a,b" {
		t.Fatalf("changed %v; want a and b", changed)
	}
	if again := fresh.ImportAdmin(st, now, nil); len(again) != 0 {
		t.Fatalf("importing the same state again changed %v", again)
	}
	// Only what pick accepts.
	fresh.setAdmin("a", Drain, "set here since", 0, true)
	fresh.ImportAdmin(st, now, func(name string, _ PeerState) bool { return name == "b" })
	if fresh.Get("a").Health().AdminState() != Drain {
		t.Fatal("a change made here was undone by a peer pick left out")
	}
}
