package cache

// This file holds the Cache: its stores shared by every config
// generation and the settings of one, lookups in memory, outcome
// counters and GET /cache figures, and 304 refreshes (collapsed
// forwarding is in flight.go).

import (
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peerd/peerd/internal/h1"
)

// Cache is the HTTP cache: RFC 9111 semantics over the memory store and,
// with [cache] disk, the disk store behind it, and the collapsing of
// concurrent misses. Its only I/O is the disk store's files; it never
// dials: the forwarding engine asks it what it holds, fetches what it
// does not through the same plan as any request, and hands it the
// responses to keep.
//
// A Cache is one config generation's view of the stores: its settings
// (the largest object, heuristics, collapsing, stale_if_dead, quick
// abort, refresh patterns) are read by a request from its start to its
// end, while the stores themselves (memory, disk, flights, counters) are
// one for every view (Reconfigured).
type Cache struct {
	*stores
	st *settings
}

// stores are what every view of a cache shares.
type stores struct {
	store *store
	// disk is the disk tier; nil without one.
	disk *disk

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
	// queue behind each other. Kept by the key's hash, not the key: a
	// client's URLs of max_header_size each would otherwise hold
	// maxPasses of them for passFor (two clashing keys only mean one is
	// not collapsed for a while).
	passes map[uint64]int64
}

func (c *Cache) flightShard(key []byte) *flightShard { return &c.flights[shardIndex(key)] }

// settings are the reloadable parts of Config.
type settings struct {
	maxObject        int64
	maxInMemory      int64 // the memory tier's largest object
	heuristicPercent int
	heuristicMax     time.Duration
	collapse         bool
	staleIfDead      time.Duration
	inflightMax      int64
	refresh          []refreshPattern
	refreshIMS       bool // some pattern has refresh_ims
	quickAbort       quickAbort
}

// refreshPattern is a compiled RefreshPattern (seconds).
type refreshPattern struct {
	re       *regexp.Regexp
	min, max int64
	percent  int
	ims      bool
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
	c := &Cache{stores: &stores{store: newStore(int64(cfg.Memory)), background: map[string]bool{}}}
	for i := range c.flights {
		c.flights[i] = flightShard{flights: map[string]*Flight{}, passes: map[uint64]int64{}}
	}
	return c.Reconfigured(cfg)
}

// Reconfigured is a view of c's stores with a reloaded [cache] section:
// stored objects stay, the stores take their new sizes at once (a
// smaller memory shrinks now), and the view's own settings are cfg's. c
// keeps its settings for the requests that hold it.
func (c *Cache) Reconfigured(cfg Config) *Cache {
	inMemory := int64(cfg.MaxObject)
	if c.disk != nil {
		inMemory = min(inMemory, int64(cfg.MaxObjectInMemory))
		c.disk.resize(int64(cfg.DiskSize))
		c.disk.fsync.Store(cfg.DiskFsync)
	}
	st := &settings{
		maxInMemory: inMemory,
		maxObject:   int64(cfg.MaxObject), heuristicPercent: cfg.HeuristicPercent,
		heuristicMax: cfg.HeuristicMax, collapse: cfg.Collapse, staleIfDead: cfg.StaleIfDead,
		quickAbort:  quickAbort{min: int64(cfg.QuickAbortMin), max: int64(cfg.QuickAbortMax), pct: cfg.QuickAbortPct},
		inflightMax: inflightBudget(int64(cfg.Memory), inMemory),
		refresh:     compileRefresh(cfg.RefreshPatterns),
	}
	for _, p := range st.refresh {
		st.refreshIMS = st.refreshIMS || p.ims
	}
	c.store.resize(int64(cfg.Memory))
	return &Cache{stores: c.stores, st: st}
}

func (c *Cache) cfg() *settings { return c.st }

// compileRefresh compiles validated patterns (one that does not compile
// is left out; Validate refused it already).
func compileRefresh(ps []RefreshPattern) []refreshPattern {
	var out []refreshPattern
	for _, p := range ps {
		if re, err := regexp.Compile(p.Pattern); err == nil {
			out = append(out, refreshPattern{re: re, min: int64(p.Min / time.Second), max: int64(p.Max / time.Second), percent: p.Percent, ims: p.RefreshIMS})
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

// MaxInMemory is the largest body kept in memory (max_object_in_memory
// with a disk store, max_object without).
func (c *Cache) MaxInMemory() int64 { return c.cfg().maxInMemory }

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
	// OutcomeDiskHit is a hit whose body came from the disk tier.
	OutcomeDiskHit
)

// Count records a request's outcome; collapsed says it was served from
// another request's response.
func (c *Cache) Count(o Outcome, collapsed bool) { c.CountKey(nil, o, collapsed) }

// CountKey is Count for the request of key.
func (c *Cache) CountKey(key []byte, o Outcome, collapsed bool) {
	switch o {
	case OutcomeHit:
		c.hits[shardIndex(key)].n.Add(1)
	case OutcomeDiskHit:
		c.hits[shardIndex(key)].n.Add(1)
		if c.disk != nil {
			c.disk.hits.Add(1)
		}
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
	// The disk tier (contract section 17); zero without one.
	DiskObjects        int64 `json:"disk_objects"`
	DiskBytes          int64 `json:"disk_bytes"`
	DiskSize           int64 `json:"disk_size"`
	DiskHits           int64 `json:"disk_hits"`
	DiskErrors         int64 `json:"disk_errors"`
	IndexLoading       bool  `json:"index_loading"`
	IndexObjectsLoaded int64 `json:"index_objects_loaded"`
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
	if c.disk != nil {
		d := c.disk.stats()
		s.DiskObjects, s.DiskBytes, s.DiskSize, s.DiskHits, s.DiskErrors = d.objects, d.bytes, d.capacity, d.hits, d.errors
		s.IndexLoading, s.IndexObjectsLoaded = d.loading, d.loaded
	}
	if total := s.Hits + s.Misses + s.Refreshes + s.StaleServed; total > 0 {
		s.HitRatio = float64(s.Hits) / float64(total)
	}
	return s
}

// Purge drops every stored variant of key from both tiers (DELETE
// /cache?url=) and reports how many there were (the larger count of the
// two tiers: an object may be in both).
func (c *Cache) Purge(key []byte) int {
	n := c.store.purge(key)
	if c.disk != nil {
		n = max(n, c.disk.purge(hashKey(key)))
	}
	return n
}

// Invalidate drops what is stored for key after an unsafe request to it
// succeeded (RFC 9111 4.4).
func (c *Cache) Invalidate(key []byte) { c.Purge(key) }

// Refresh merges a 304 into the stored object it validated (RFC 9111
// 4.3.4): the 304's fields replace the stored ones of the same name,
// Content-Length excepted, and its times make the new freshness. The
// refreshed object is stored in the old one's place and returned. A 304
// that does not select old (Object.Selects) refreshes nothing: old is
// dropped, and Refresh returns nil (the caller fetches it again, without
// conditionals).
func (c *Cache) Refresh(old *Object, r *Request, resp *h1.Response, reqTime, respTime time.Time) *Object {
	if !old.Selects(resp) {
		c.store.remove(old)
		c.forgetOnDisk(old)
		return nil
	}
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
		Key: old.Key, Status: old.Status, reason: old.reason, fields: fields, Body: old.Body, disk: old.disk, loadedFrom: old.diskID(),
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
	o.Size = o.sizeWith(int64(len(o.Body)))
	if cc.has(ccNoStore) || cc.has(ccPrivate) {
		c.store.remove(old)
		c.forgetOnDisk(old)
		return o
	}
	c.store.put(o)
	c.persistRefresh(o)
	return o
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
