package admin

import (
	"sync"

	"golang.org/x/time/rate"
)

// tokenGuard limits failed token attempts per source address, so the
// write token cannot be guessed at line rate: each source may fail 5
// times in a burst and then once a second; further attempts get 429 until
// it slows down. A correct token never consumes the allowance.
type tokenGuard struct {
	mu      sync.Mutex
	sources map[string]*rate.Limiter
}

const (
	guardBurst   = 5
	guardRate    = rate.Limit(1) // per second
	guardSources = 4096          // beyond this many tracked sources, idle ones are dropped
)

func newTokenGuard() *tokenGuard { return &tokenGuard{sources: make(map[string]*rate.Limiter)} }

// allowed reports whether src may try a token now.
func (g *tokenGuard) allowed(src string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.sources[src]
	return l == nil || l.Tokens() >= 1
}

// failed spends one of src's attempts.
func (g *tokenGuard) failed(src string) {
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
	l.Allow()
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
