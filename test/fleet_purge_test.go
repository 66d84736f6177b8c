package e2e

// Purge everywhere (issue 44, contract section 20): a purge made on one
// member of a fleet removes the object from every member, each of which
// acknowledges it.

import (
	"net/url"
	"slices"
	"testing"
)

func TestFleetPurgeEverywhere(t *testing.T) {
	t.Parallel()
	p1 := newFakeParent(t, "p1")
	p1.SetHeader("Cache-Control", "max-age=600")
	ms := startFleet(t, func(string) string { return fleetHealth + peerBlock("", p1) })
	const u = "http://origin.test/fleet-purge/object"
	getAll := func(round string) {
		for i, m := range ms {
			if r := do(m.client(), "GET", u, ""); r.status != 200 {
				t.Fatalf("%s: GET through member %d: %s", round, i, r)
			}
		}
	}
	getAll("first")
	fetched := p1.requests("GET")
	getAll("stored")
	if n := p1.requests("GET"); n != fetched {
		t.Fatalf("stored: %d more parent fetches; want none (each member keeps its copy)", n-fetched)
	}
	var out struct {
		Purged       int      `json:"purged"`
		Acknowledged []string `json:"acknowledged"`
		Missing      []string `json:"missing"`
	}
	if code := ms[0].adminJSON("DELETE", "/cache?url="+url.QueryEscape(u), "secret", &out); code != 200 {
		t.Fatalf("purge: %d", code)
	}
	if out.Purged != 1 || !slices.Equal(out.Acknowledged, []string{"b", "c"}) || len(out.Missing) != 0 {
		t.Fatalf("purge on a: %+v; want purged 1, acknowledged by b and c", out)
	}
	before := p1.requests("GET")
	getAll("after the purge")
	if n := p1.requests("GET") - before; n != len(ms) {
		t.Fatalf("after a purge on a: %d parent fetches through the three members; want 3 (every copy gone)", n)
	}
}
