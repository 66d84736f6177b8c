package cache

import (
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peerd/peerd/internal/h1"
)

// Cache is the HTTP cache: RFC 9111 semantics over the memory store, and
// the collapsing of concurrent misses. It does no I/O: the forwarding
// engine asks it what it holds, fetches what it does not through the
// same plan as any request, and hands it the responses to keep.
type Cache struct {
	settings atomic.Pointer[settings]
	store    *store

	// The flights of collapsed requests, sharded by key like the store
	// so that concurrent misses for different keys share no lock.
	flights [nShards]flightShard

	mu sync.Mutex
	// background are the keys being revalidated behind a stale answer.
	background map[string]bool

	// hits are counted per store shard (a hit's key picks one), so that
	// concurrent hits do not all bounce one cache line.
	hits                                [nShards]paddedCounter
	misses, refreshes, stale, collapsed atomic.Int64

	// inflight is the bytes reserved by responses on their way to the
	// store; past settings.inflightMax a response is relayed, not stored.
	inflight atomic.Int64
	// overBudget counts responses not stored for that reason.
	overBudget atomic.Int64
}

type paddedCounter struct {
	n atomic.Int64
	_ [56]byte
}

type flightShard struct {
	mu      sync.Mutex
	flights map[string]*Flight
	// passes are the keys whose last answer could not be stored, until
	// when (Unix nanoseconds): their requests are not collapsed
	// (Varnish's hit-for-miss), so requests for uncacheable URLs never
	// queue behind each other.
	passes map[string]int64
}

func (c *Cache) flightShard(key []byte) *flightShard { return &c.flights[shardIndex(key)] }

// settings are the reloadable parts of Config.
type settings struct {
	maxObject        int64
	heuristicPercent int
	heuristicMax     time.Duration
	collapse         bool
	staleIfDead      time.Duration
	inflightMax      int64
	refresh          []refreshPattern
}

// refreshPattern is a compiled RefreshPattern (seconds).
type refreshPattern struct {
	re       *regexp.Regexp
	min, max int64
	percent  int
}

// passFor is how long a key whose answer could not be stored skips
// collapsing.
const passFor = 2 * time.Minute

// New returns a cache with cfg; nil when cfg.Memory is 0 (the cache is
// off).
func New(cfg Config) *Cache {
	if cfg.Memory <= 0 {
		return nil
	}
	c := &Cache{store: newStore(int64(cfg.Memory)), background: map[string]bool{}}
	for i := range c.flights {
		c.flights[i] = flightShard{flights: map[string]*Flight{}, passes: map[string]int64{}}
	}
	c.Reconfigure(cfg)
	return c
}

// Reconfigure applies a reloaded [cache] section: stored objects stay,
// the store shrinks to a smaller memory at once.
func (c *Cache) Reconfigure(cfg Config) {
	c.settings.Store(&settings{
		maxObject: int64(cfg.MaxObject), heuristicPercent: cfg.HeuristicPercent,
		heuristicMax: cfg.HeuristicMax, collapse: cfg.Collapse, staleIfDead: cfg.StaleIfDead,
		inflightMax: inflightBudget(int64(cfg.Memory), int64(cfg.MaxObject)),
		refresh:     compileRefresh(cfg.RefreshPatterns),
	})
	c.store.resize(int64(cfg.Memory))
}

func (c *Cache) cfg() *settings { return c.settings.Load() }

// compileRefresh compiles validated patterns (one that does not compile
// is left out; Validate refused it already).
func compileRefresh(ps []RefreshPattern) []refreshPattern {
	var out []refreshPattern
	for _, p := range ps {
		if re, err := regexp.Compile(p.Pattern); err == nil {
			out = append(out, refreshPattern{re: re, min: int64(p.Min / time.Second), max: int64(p.Max / time.Second), percent: p.Percent})
		}
	}
	return out
}

// inflightBudget is how many bytes responses being stored may hold at
// once: a quarter of the memory, and at least one largest object, so that
// the cache's memory use is bounded by memory plus this while storing.
func inflightBudget(memory, maxObject int64) int64 {
	return max(memory/4, min(maxObject, memory))
}

// StaleIfDead is the configured stale_if_dead.
func (c *Cache) StaleIfDead() time.Duration { return c.cfg().staleIfDead }

// Verdict is what a lookup found.
type Verdict uint8

const (
	// Miss: nothing stored for the URL.
	Miss Verdict = iota
	// VaryMiss: responses stored for the URL, none for this request's
	// selecting fields.
	VaryMiss
	// Hit: a response usable as it is.
	Hit
	// Stale: a response that must be validated first (stale, no-cache,
	// or the request's directives).
	Stale
)

// Lookup finds the stored response for r at now.
func (c *Cache) Lookup(r *Request, now time.Time) (*Object, Verdict) {
	o, variants := c.store.get(r.Key, r)
	switch {
	case o != nil && o.freshFor(r, now.UnixNano()):
		return o, Hit
	case o != nil:
		return o, Stale
	case variants > 0:
		return nil, VaryMiss
	}
	return nil, Miss
}

// Outcome counts one request's result for GET /cache and the metrics.
type Outcome uint8

const (
	OutcomeHit Outcome = iota
	OutcomeMiss
	OutcomeRefresh
	OutcomeStale
)

// Count records a request's outcome; collapsed says it was served from
// another request's response.
func (c *Cache) Count(o Outcome, collapsed bool) { c.CountKey(nil, o, collapsed) }

// CountKey is Count for the request of key.
func (c *Cache) CountKey(key []byte, o Outcome, collapsed bool) {
	switch o {
	case OutcomeHit:
		c.hits[shardIndex(key)].n.Add(1)
	case OutcomeMiss:
		c.misses.Add(1)
	case OutcomeRefresh:
		c.refreshes.Add(1)
	case OutcomeStale:
		c.stale.Add(1)
	}
	if collapsed {
		c.collapsed.Add(1)
	}
}

// Stats is GET /cache.
type Stats struct {
	Objects     int     `json:"objects"`
	Bytes       int64   `json:"bytes"`
	Memory      int64   `json:"memory"`
	Hits        int64   `json:"hits"`
	Misses      int64   `json:"misses"`
	HitRatio    float64 `json:"hit_ratio"`
	Collapsed   int64   `json:"collapsed"`
	StaleServed int64   `json:"stale_served"`
	Refreshes   int64   `json:"refreshes"`
}

// Stats sums the store and the counters.
func (c *Cache) Stats() Stats {
	var hits int64
	for i := range c.hits {
		hits += c.hits[i].n.Load()
	}
	s := Stats{Hits: hits, Misses: c.misses.Load(), Collapsed: c.collapsed.Load(),
		StaleServed: c.stale.Load(), Refreshes: c.refreshes.Load(), Memory: c.store.capacity()}
	s.Objects, s.Bytes = c.store.stats()
	if total := s.Hits + s.Misses + s.Refreshes + s.StaleServed; total > 0 {
		s.HitRatio = float64(s.Hits) / float64(total)
	}
	return s
}

// Purge drops every stored variant of key (DELETE /cache?url=).
func (c *Cache) Purge(key []byte) int { return c.store.purge(key) }

// Invalidate drops what is stored for key after an unsafe request to it
// succeeded (RFC 9111 4.4).
func (c *Cache) Invalidate(key []byte) { c.store.purge(key) }

// Storing.

// Writer stores one response while it is relayed: the client gets the
// bytes as they arrive, the store a copy. A response that grows past
// max_object, or breaks off, is dropped without harming the client.
type Writer struct {
	c      *Cache
	o      *Object
	f      *Flight
	length int64 // -1: not known until the end
	max    int64
	n      int64
	dead   bool
	// reserved is what this writer holds of the in-flight budget.
	reserved int64
}

// Admit decides whether the response to r (its head; length is its
// body's length, -1 when unknown) is stored. It returns nil when not,
// and then a flight r leads is landed empty: the waiting requests go to
// the next hop on their own and the key is not collapsed for a while.
func (c *Cache) Admit(r *Request, resp *h1.Response, length int64, reqTime, respTime time.Time, f *Flight) *Writer {
	st := c.cfg()
	o, ok := c.build(r, resp, reqTime, respTime)
	if !ok || length > st.maxObject {
		c.Land(f, nil, true)
		return nil
	}
	o.Key = string(r.Key)
	if length >= 0 && !c.store.fits(o.Key, int64(len(o.Key)+len(o.secondary)+len(o.fields))+length+objectOverhead) {
		// It could never be kept (larger than its shard's share of the
		// memory): it is relayed, and never said to be stored.
		c.Land(f, nil, true)
		return nil
	}
	w := &Writer{c: c, o: o, f: f, length: length, max: st.maxObject}
	if length > 0 && !w.reserve(length) {
		// Too many bytes on their way to the store already: this one is
		// relayed without storing, so memory stays bounded.
		c.Land(f, nil, true)
		return nil
	}
	o.stream = &stream{}
	o.stream.cond.L = &o.stream.mu
	o.length = length
	if length >= 0 {
		// The length is known: followers stream from the object as its
		// body arrives.
		c.Land(f, o, false)
		w.f = nil
	}
	return w
}

// reserve takes n bytes of the in-flight budget.
func (w *Writer) reserve(n int64) bool {
	c := w.c
	if c.inflight.Add(n) > c.cfg().inflightMax {
		c.inflight.Add(-n)
		c.overBudget.Add(1)
		return false
	}
	w.reserved += n
	return true
}

// unreserve gives back what the writer holds of the budget.
func (w *Writer) unreserve() {
	w.c.inflight.Add(-w.reserved)
	w.reserved = 0
}

// growth is the least a body grows by at once.
const growth = 32 << 10

// Write copies relayed body bytes. The body grows as bytes arrive (never
// the whole Content-Length at once), within the in-flight budget.
func (w *Writer) Write(p []byte) {
	if w == nil || w.dead || len(p) == 0 {
		return
	}
	o := w.o
	limit := w.max
	if w.length >= 0 {
		limit = w.length
	}
	if w.n+int64(len(p)) > limit {
		w.fail()
		return
	}
	body := o.Body
	if need := len(body) + len(p); need > cap(body) {
		c := min(max(2*int64(cap(body)), int64(need), growth), limit)
		if w.length < 0 && c > w.reserved && !w.reserve(c-w.reserved) {
			w.fail()
			return
		}
		nb := make([]byte, len(body), c)
		copy(nb, body)
		body = nb
	}
	body = append(body, p...)
	w.n += int64(len(p))
	s := o.stream
	s.mu.Lock()
	o.Body, s.n = body, w.n
	s.mu.Unlock()
	s.cond.Broadcast()
}

func (w *Writer) fail() {
	w.dead = true
	w.unreserve()
	s := w.o.stream
	s.mu.Lock()
	s.failed = true
	s.mu.Unlock()
	s.cond.Broadcast()
	w.c.Land(w.f, nil, true)
}

// Finish ends the body: complete says it arrived whole, and the object
// is stored; otherwise it is dropped.
func (w *Writer) Finish(complete bool) {
	if w.dead {
		return
	}
	o := w.o
	if !complete || (w.length >= 0 && w.n != w.length) {
		w.fail()
		return
	}
	if w.length < 0 {
		// A body of unknown length: no follower reads it before this
		// (its flight lands below), so it is trimmed of slack and its
		// length set without the stream's lock.
		if cap(o.Body) > len(o.Body)+len(o.Body)/8 {
			o.Body = append([]byte(nil), o.Body...)
		}
		o.length = int64(len(o.Body))
	}
	w.unreserve()
	o.Size = int64(len(o.Key)+len(o.secondary)+len(o.fields)+len(o.Body)) + objectOverhead
	w.c.put(o)
	s := o.stream
	s.mu.Lock()
	s.n, s.done = w.n, true
	s.mu.Unlock()
	s.cond.Broadcast()
	w.c.Land(w.f, o, false)
	w.dead = true
}

// Stored reports whether the writer is still keeping the response.
func (w *Writer) Stored() bool { return w != nil && !w.dead }

// objectOverhead approximates an object's bookkeeping bytes.
const objectOverhead = 256

// put stores o; a complete response replaces the partial ones of its
// variant.
func (c *Cache) put(o *Object) {
	c.store.put(o)
	if !o.partial {
		c.store.dropPartials(o)
	}
}

// Refresh merges a 304 into the stored object it validated (RFC 9111
// 4.3.4): the 304's fields replace the stored ones of the same name,
// Content-Length excepted, and its times make the new freshness. The
// refreshed object is stored in the old one's place and returned.
func (c *Cache) Refresh(old *Object, r *Request, resp *h1.Response, reqTime, respTime time.Time) *Object {
	var cc Directives
	fields := make([]byte, 0, len(old.fields)+fieldsSize(resp))
	replaced := func(name []byte) bool {
		for _, f := range resp.Fields {
			if equalFold(f.Name, string(name)) && f.Kind != h1.ContentLength && storedField(f, resp, &cc) {
				return true
			}
		}
		return false
	}
	// A 304 without a Date was made now (RFC 9110 6.6.1): the refreshed
	// object is dated now, or the old Date would leave it stale.
	dated := resp.Get("Date") != nil
	eachLine(old.fields, func(name, value []byte) {
		if !replaced(name) && (dated || kind(name) != h1.Date) {
			fields = appendLine(fields, name, value)
		}
	})
	for _, f := range resp.Fields {
		if f.Kind != h1.ContentLength && storedField(f, resp, &cc) {
			fields = appendLine(fields, f.Name, f.Value)
		}
	}
	if !dated {
		fields = append(fields, "Date: "...)
		fields = appendHTTPDate(fields, respTime)
		fields = append(fields, "\r\n"...)
	}
	o := &Object{
		Key: old.Key, Status: old.Status, reason: old.reason, fields: fields, Body: old.Body,
		partial: old.partial, first: old.first, total: old.total,
		requestTime: reqTime.UnixNano(), responseTime: respTime.UnixNano(),
	}
	o.index(nil)
	o.setAge(resp)
	eachLine(o.fields, func(name, value []byte) {
		if kind(name) == h1.CacheControl {
			parseCC(&cc, value)
		}
	})
	o.flags, o.swr, o.sie = cc.flags, cc.StaleWhileRevalidate, cc.StaleIfError
	o.lifetime = c.lifetime(o, &cc, o.Key)
	o.vary, o.varyValues, o.secondary = old.vary, old.varyValues, old.secondary
	o.Size = int64(len(o.Key)+len(o.secondary)+len(o.fields)+len(o.Body)) + objectOverhead
	if cc.has(ccNoStore) || cc.has(ccPrivate) {
		c.store.remove(old)
		return o
	}
	c.store.put(o)
	return o
}

// Collapsed forwarding.

// Flight is one request to the next hop that concurrent requests for the
// same key wait for instead of sending their own.
type Flight struct {
	key    string
	ready  chan struct{}
	obj    *Object
	landed bool
	// failed: the leader got no answer to share (it failed, or its client
	// left); the followers elect a new leader rather than all going to
	// the next hop. Set before ready is closed.
	failed bool
}

// FlightEnd is how a follower's wait ended.
type FlightEnd uint8

const (
	// Shared: the leader's response is there to answer from (it may
	// still be streaming).
	Shared FlightEnd = iota
	// Alone: the response could not be shared; go to the next hop.
	Alone
	// Failed: the leader got no answer; join again to elect a new one.
	Failed
	// Left: the follower's client went away.
	Left
	// TimedOut: the leader took longer than the follower may wait.
	TimedOut
)

// Join returns the flight for r's key: leader true means r goes to the
// next hop and must land the flight (Admit, Finish or Land); otherwise r
// waits for it. nil means r is not collapsed: collapsing is off, the
// request is not a plain one, or the key's last answer was not storable.
func (c *Cache) Join(r *Request, now time.Time) (f *Flight, leader bool) {
	if !c.cfg().collapse || r.Method != "GET" || r.Conditional || r.Range != nil || r.Authorization || r.CC.NoStore() {
		return nil, false
	}
	sh := c.flightShard(r.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if until, ok := sh.passes[string(r.Key)]; ok {
		if now.UnixNano() < until {
			return nil, false
		}
		delete(sh.passes, string(r.Key))
	}
	if f := sh.flights[string(r.Key)]; f != nil {
		return f, false
	}
	f = &Flight{key: string(r.Key), ready: make(chan struct{})}
	sh.flights[f.key] = f
	return f, true
}

// Wait blocks until the flight's response is known, the follower's
// client leaves (gone is closed), or timeout; it returns the object to
// answer from when the end is Shared.
func (f *Flight) Wait(timeout time.Duration, gone <-chan struct{}) (*Object, FlightEnd) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-f.ready:
		switch {
		case f.obj != nil:
			return f.obj, Shared
		case f.failed:
			return nil, Failed
		}
		return nil, Alone
	case <-gone:
		return nil, Left
	case <-t.C:
		return nil, TimedOut
	}
}

// Land ends a flight with the object its followers are served from. With
// nil and pass the response could not be shared: they go on their own and
// the key is not collapsed for a while; with nil and no pass the leader
// failed: they elect a new leader. Landing twice, or a nil flight, is
// harmless.
func (c *Cache) Land(f *Flight, o *Object, pass bool) {
	if f == nil {
		return
	}
	sh := c.flightShard([]byte(f.key))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if f.landed {
		return
	}
	f.landed, f.obj, f.failed = true, o, o == nil && !pass
	if sh.flights[f.key] == f {
		delete(sh.flights, f.key)
	}
	if pass {
		sh.passes[f.key] = time.Now().Add(passFor).UnixNano()
		if len(sh.passes) > maxPasses/nShards {
			sh.trimPassesLocked()
		}
	}
	close(f.ready)
}

// maxPasses bounds the hit-for-miss table.
const maxPasses = 64 << 10

func (sh *flightShard) trimPassesLocked() {
	now := time.Now().UnixNano()
	for k, until := range sh.passes {
		if until <= now || len(sh.passes) > maxPasses/nShards/2 {
			delete(sh.passes, k)
		}
	}
}

// Matches reports whether o answers r (a follower checks the response it
// waited for against its own selecting fields).
func (o *Object) Matches(r *Request) bool { return o.matches(r) }

// StartBackground claims the background revalidation of key: false when
// one is already under way.
func (c *Cache) StartBackground(key []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.background[string(key)] {
		return false
	}
	c.background[string(key)] = true
	return true
}

// EndBackground releases what StartBackground claimed.
func (c *Cache) EndBackground(key string) {
	c.mu.Lock()
	delete(c.background, key)
	c.mu.Unlock()
}
