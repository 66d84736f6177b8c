package selection

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/peerd/peerd/internal/match"
)

// TestTiers: a higher tier is used only when no peer of a lower tier is
// usable; policies apply within a tier; default parents stay last.
func TestTiers(t *testing.T) {
	f := newFixture(t, "b1:t1", "a1", "dflt:d", "a2", "c1:t2")
	pl := New(f.reg, Options{Policy: FirstUp, Direct: DirectNever})
	r := Request{Method: "GET", URL: "http://x.test/", Host: "x.test", Port: 80, ClientIP: "10.0.0.1"}
	if got := walkAll(pl, r); !slices.Equal(got, []string{"a1", "a2", "b1", "c1", "dflt"}) {
		t.Fatalf("plan %v; want tier 0 (a1 a2), tier 1, tier 2, then the default parent", got)
	}
	f.kill("a1")
	f.kill("a2")
	if got := walkAll(pl, r); got[0] != "b1" {
		t.Fatalf("with tier 0 dead the plan starts %v; want the tier-1 parent", got)
	}
}

// TestRoutes: the first route that matches chooses the peers, policy and
// direct; a request no route matches may use every peer.
func TestRoutes(t *testing.T) {
	f := newFixture(t, "a", "b", "c")
	routes, err := CompileRoutes([]RouteSpec{
		{Spec: match.Spec{Domains: []string{".media.test"}}, Peers: []string{"c"}},
		{Spec: match.Spec{Src: []string{"10.9.0.0/16"}}, Peers: []string{"b"}, Direct: "never"},
		{Spec: match.Spec{Domains: []string{".media.test", ".other.test"}}, Peers: []string{"a"}}, // shadowed for media.test
		{Spec: match.Spec{Methods: []string{"CONNECT"}}, Peers: []string{}, Direct: "always"},
	}, map[string]bool{"a": true, "b": true, "c": true})
	if err != nil {
		t.Fatal(err)
	}
	pl := New(f.reg, Options{Policy: FirstUp, Direct: DirectAllow, Routes: routes})
	req := func(method, host, client string) Request {
		return Request{Method: method, URL: "http://" + host + "/", Host: host, Port: 80, ClientIP: client}
	}
	for _, tc := range []struct {
		r     Request
		route int
		hops  []string
	}{
		{req("GET", "www.media.test", "10.9.1.1"), 0, []string{"c", "DIRECT"}},
		{req("GET", "x.test", "10.9.1.1"), 1, []string{"b"}},
		{req("GET", "a.other.test", "10.1.1.1"), 2, []string{"a", "DIRECT"}},
		{req("CONNECT", "x.test", "10.1.1.1"), 3, []string{"DIRECT"}},
		{req("GET", "x.test", "10.1.1.1"), -1, []string{"a", "b", "c", "DIRECT"}},
	} {
		plan := pl.Plan(tc.r)
		if plan.Route() != tc.route {
			t.Errorf("%s %s from %s: route %d; want %d", tc.r.Method, tc.r.Host, tc.r.ClientIP, plan.Route(), tc.route)
		}
		if got := walkAll(pl, tc.r); !slices.Equal(got, tc.hops) {
			t.Errorf("%s %s from %s: hops %v; want %v", tc.r.Method, tc.r.Host, tc.r.ClientIP, got, tc.hops)
		}
	}
	if _, err := CompileRoutes([]RouteSpec{{Peers: []string{"zz"}}}, map[string]bool{"a": true}); err == nil {
		t.Fatal("a route to an unknown peer compiled")
	}
}

// TestRouteIndexIsFirstMatch: the index (domain-only routes looked up by
// label, the others in order) answers what trying every route in order
// answers, on random routes and hosts.
func TestRouteIndexIsFirstMatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	labels := []string{"a", "b", "c", "test", "example"}
	name := func() string {
		n := 1 + rng.IntN(3)
		s := labels[rng.IntN(len(labels))]
		for i := 1; i < n; i++ {
			s = labels[rng.IntN(len(labels))] + "." + s
		}
		return s
	}
	for round := 0; round < 200; round++ {
		var specs []RouteSpec
		for i := 0; i < 1+rng.IntN(12); i++ {
			var s RouteSpec
			for j := 0; j < 1+rng.IntN(3); j++ {
				d := name()
				if rng.IntN(2) == 0 {
					d = "." + d
				}
				s.Domains = append(s.Domains, d)
			}
			if rng.IntN(4) == 0 {
				s.Ports = []string{fmt.Sprint(80 + rng.IntN(2))}
			}
			specs = append(specs, s)
		}
		routes, err := CompileRoutes(specs, nil)
		if err != nil {
			t.Fatal(err)
		}
		x := indexRoutes(routes)
		for k := 0; k < 50; k++ {
			r := Request{Method: "GET", Host: name(), Port: 80 + rng.IntN(2), ClientIP: "10.0.0.1"}
			linear := -1
			for i := range routes {
				if routes[i].m.Match(&match.Request{Host: r.Host, Port: r.Port, Method: r.Method}) {
					linear = i
					break
				}
			}
			if got := x.routeFor(routes, &r); got != linear {
				t.Fatalf("routes %+v, host %s port %d: index says %d, in order %d", specs, r.Host, r.Port, got, linear)
			}
		}
	}
}

// TestPlanWithoutRoutesAllocatesNothing: routes cost nothing to a config
// that has none.
func TestPlanWithoutRoutesAllocatesNothing(t *testing.T) {
	f := newFixture(t, "a", "b", "c", "d", "e", "f", "g", "h")
	pl := New(f.reg, Options{Policy: CARP, Direct: DirectAllow})
	r := Request{Method: "GET", URL: "http://example.com/p", Host: "example.com", Port: 80, ClientIP: "192.0.2.7"}
	if n := testing.AllocsPerRun(100, func() {
		plan := pl.Plan(r)
		plan.Next()
	}); n != 0 {
		t.Fatalf("%v allocations per plan; want 0", n)
	}
}

// BenchmarkRoutes: the first hop of a plan with 0 or 1,000 domain routes
// (the request matching the last route, or none).
func BenchmarkRoutes(b *testing.B) {
	for _, n := range []int{0, 1000} {
		for _, host := range []string{"www.site999.test", "unrouted.example"} {
			b.Run(fmt.Sprintf("routes=%d/%s", n, host), func(b *testing.B) {
				f := newFixture(b, "a", "b", "c", "d", "e", "f", "g", "h")
				var specs []RouteSpec
				for i := 0; i < n; i++ {
					specs = append(specs, RouteSpec{Spec: match.Spec{Domains: []string{fmt.Sprintf(".site%d.test", i)}}, Peers: []string{"a", "b"}})
				}
				routes, err := CompileRoutes(specs, map[string]bool{"a": true, "b": true})
				if err != nil {
					b.Fatal(err)
				}
				pl := New(f.reg, Options{Policy: FirstUp, Direct: DirectAllow, Routes: routes})
				r := Request{Method: "GET", URL: "http://" + host + "/", Host: host, Port: 80, ClientIP: "192.0.2.7"}
				b.ReportAllocs()
				for b.Loop() {
					plan := pl.Plan(r)
					if _, ok := plan.Next(); !ok {
						b.Fatal("no hop")
					}
				}
			})
		}
	}
}
