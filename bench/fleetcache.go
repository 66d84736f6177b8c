package main

// This file holds the shared-cache section: one counting parent, a
// working set of 1,000 objects of 64 KiB (62.5 MiB) larger than one
// member's 32 MiB memory cache, asked three times over in a shuffled order
// through 1 peerd, and through 3 peerds with [fleet] shared_cache (clients
// spread over the members as by a load balancer). The row is the parent
// fetches and the hit ratio.

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peerd/peerd/internal/testbed"
)

// SharedRow is one run of the shared-cache section.
type SharedRow struct {
	Members        int     `json:"members"`
	Requests       int     `json:"requests"`
	ClientErrors   int     `json:"client_errors"`
	ParentFetches  int     `json:"parent_fetches"`
	HitRatio       float64 `json:"hit_ratio"`
	WorkingSetMiB  float64 `json:"working_set_mib"`
	MemberCacheMiB int     `json:"member_cache_mib"`
}

const (
	sharedObjects = 1000
	sharedSize    = 64 << 10
	sharedPasses  = 3
	sharedMemMiB  = 32
)

func sharedRun(work, bin string) []SharedRow {
	return []SharedRow{sharedOnce(work, bin, 1), sharedOnce(work, bin, 3)}
}

func sharedOnce(work, bin string, n int) SharedRow {
	parent, err := testbed.NewParent("p1", sharedSize)
	must(err)
	defer parent.Close()
	parent.SetHeader("Cache-Control", "max-age=3600")
	hops := []hop{hopOf(parent)}
	cache := fmt.Sprintf("[cache]\nmemory = \"%dMiB\"\n", sharedMemMiB)
	var members []*child
	if n == 1 {
		members = append(members, startPeerd(work, bin, hops, "name = \"solo\"\n"+cache))
	} else {
		fleet := func(name, join string) string {
			return fmt.Sprintf("name = %q\n%s[fleet]\nbind = \"127.0.0.1:0\"\nshared_cache = true\njoin = [%s]\n", name, cache, join)
		}
		a := startPeerd(work, bin, hops, fleet("a", ""))
		join := gossipAddr(a)
		members = []*child{a, startPeerd(work, bin, hops, fleet("b", join)), startPeerd(work, bin, hops, fleet("c", join))}
		// Until every member names the same owners (each publishes its
		// proxy port once it listens).
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) && !ownersAgree(members) {
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, m := range members {
		defer m.stop()
	}
	cls := make([]*http.Client, len(members))
	for i, m := range members {
		cls[i] = proxyClient(m.addr, 15*time.Second)
	}
	order := make([]int, 0, sharedObjects*sharedPasses)
	rng := rand.New(rand.NewPCG(7, uint64(n)))
	for p := 0; p < sharedPasses; p++ {
		order = append(order, rng.Perm(sharedObjects)...)
	}
	before := parent.RequestsOf("GET")
	var next, errs atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1)) - 1
				if k >= len(order) {
					return
				}
				if !getOK(cls[k%len(cls)], fmt.Sprintf("http://origin.bench/shared/%d", order[k])) {
					errs.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	fetched := parent.RequestsOf("GET") - before
	row := SharedRow{Members: n, Requests: len(order), ClientErrors: int(errs.Load()), ParentFetches: fetched,
		WorkingSetMiB: float64(sharedObjects*sharedSize) / (1 << 20), MemberCacheMiB: sharedMemMiB}
	row.HitRatio = 1 - float64(fetched)/float64(len(order))
	fmt.Fprintf(os.Stderr, "  %d member(s): %d parent fetches for %d requests, hit ratio %.3f, %d errors\n", n, fetched, len(order), row.HitRatio, row.ClientErrors)
	return row
}

// ownersAgree reports whether every member names the same owner for a
// few URLs, and all of them own some.
func ownersAgree(ms []*child) bool {
	seen := map[string]bool{}
	for i := 0; i < 30; i++ {
		u := fmt.Sprintf("http://origin.bench/agree/%d", i)
		var first string
		for k, m := range ms {
			var e struct {
				Owner *string `json:"owner"`
			}
			getJSON("http://"+m.admin+"/plan?url="+u, &e)
			if e.Owner == nil {
				return false
			}
			if k == 0 {
				first = *e.Owner
			} else if *e.Owner != first {
				return false
			}
		}
		seen[first] = true
	}
	return len(seen) == len(ms)
}

func (r *Results) sharedSection() string {
	if len(r.Shared) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## 6c. Shared cache: %d objects of %d KiB (%.1f MiB) asked %d times over, each member's memory cache %d MiB\n\n",
		sharedObjects, sharedSize>>10, r.Shared[0].WorkingSetMiB, sharedPasses, sharedMemMiB)
	b.WriteString("| members | requests | client errors | parent fetches | hit ratio |\n|---|---:|---:|---:|---:|\n")
	for _, s := range r.Shared {
		name := "1 peerd"
		if s.Members > 1 {
			name = fmt.Sprintf("%d peerds, shared_cache", s.Members)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %.3f |\n", name, s.Requests, s.ClientErrors, s.ParentFetches, s.HitRatio)
	}
	return b.String()
}
