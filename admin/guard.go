package admin

// This file holds the bearer-token guard of the write endpoints: failed
// tokens slowed per source.

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// tokenGuard bounds token guessing by time. Each source has an
// allowance of failures (5 in a burst, then one a second): past it, its
// attempts are refused (429) before the token is compared, the right one
// too, however many connections it opens. All sources together have one
// too (50, then 20 a second, so that rotating addresses does not help):
// past it, a wrong token is answered after failDelay with 429. A right
// token from a source within its allowance never waits or counts.
type tokenGuard struct {
	mu      sync.Mutex
	sources map[string]*rate.Limiter
	all     *rate.Limiter
}

const (
	guardBurst    = 5
	guardRate     = rate.Limit(1) // per second
	guardAllBurst = 50
	guardAllRate  = rate.Limit(20)
	guardSources  = 4096 // beyond this many tracked sources, idle ones are dropped
	// failDelay is how long a failure past the allowance waits for its
	// answer.
	failDelay = 500 * time.Millisecond
)

func newTokenGuard() *tokenGuard {
	return &tokenGuard{sources: make(map[string]*rate.Limiter), all: rate.NewLimiter(guardAllRate, guardAllBurst)}
}

// failed spends one of src's attempts and reports whether src (or the
// API as a whole) is past its allowance: that failure is slowed down.
func (g *tokenGuard) failed(src string) (slow bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.sources[src]
	if l == nil {
		if len(g.sources) >= guardSources {
			g.sweepLocked()
		}
		l = rate.NewLimiter(guardRate, guardBurst)
		g.sources[src] = l
	}
	own := l.Allow()
	all := g.all.Allow()
	return !own || !all
}

// over reports whether src has spent its failure allowance: its next
// attempt is refused before its token is compared.
func (g *tokenGuard) over(src string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.sources[src]
	return l != nil && l.Tokens() < 1
}

// sweepLocked drops sources whose allowance is full again.
func (g *tokenGuard) sweepLocked() {
	for k, l := range g.sources {
		if l.Tokens() >= guardBurst {
			delete(g.sources, k)
		}
	}
	if len(g.sources) >= guardSources {
		clear(g.sources) // a flood from many sources: start over
	}
}
