package peers

import (
	"slices"
	"testing"
)

// The change feed names the peers a write changed, and only those; a
// reload says "all"; a request's success on an alive peer changes nothing.
func TestChangeFeedNamesChangedPeers(t *testing.T) {
	r, _ := newTestRegistry(t, 1, parent("p1", 1), parent("p2", 2), parent("p3", 3))
	feed := r.Subscribe()
	if _, all := feed.Take(); !all {
		t.Fatal("a new feed's first take is not every peer")
	}
	pending := func() bool {
		select {
		case <-feed.C():
			return true
		default:
			return false
		}
	}
	names := func() []string {
		ps, all := feed.Take()
		if all {
			return []string{"all"}
		}
		var out []string
		for _, p := range ps {
			out = append(out, p.Name())
		}
		slices.Sort(out)
		return out
	}
	p1 := r.Get("p1")
	succeed(r, p1, true) // unknown -> alive
	if !pending() || !slices.Equal(names(), []string{"p1"}) {
		t.Fatal("p1's revival is not in the feed alone")
	}
	succeed(r, p1, false) // alive stays alive: no write
	if pending() {
		t.Fatal("a success on an alive peer was reported")
	}
	fail(r, p1, false)
	if _, err := r.SetAdminState("p2", Drain); err != nil {
		t.Fatal(err)
	}
	if !pending() || !slices.Equal(names(), []string{"p1", "p2"}) {
		t.Fatal("a death and an admin change are not both in the feed")
	}
	if err := r.Reconcile(*r.opts.Load(), []Spec{parent("p1", 1)}); err != nil {
		t.Fatal(err)
	}
	if !pending() || !slices.Equal(names(), []string{"all"}) {
		t.Fatal("a reload is not reported as every peer")
	}
	r.Unsubscribe(feed)
	fail(r, r.Get("p1"), true)
	if pending() {
		t.Fatal("an unsubscribed feed was told")
	}
}
