// doc.go holds the cache package's documentation.

// Package cache is peerd's HTTP cache (RFC 9111): what a response may be
// stored as, for how long and for which requests, and the stores that keep
// it. It never dials; the forwarding engine asks it what it holds and
// fetches what it does not through the same plan, retries and health
// accounting as any request.
//
// Its parts, by file:
//
//   - Semantics as functions over parsed heads (internal/h1): keys and
//     Vary (request.go), Cache-Control (cc.go), freshness, Age, the
//     heuristic and refresh_patterns (build.go, object.go), validation
//     and 304 refreshes, ranges (range.go), invalidation by unsafe
//     methods, dates (date.go).
//   - The memory store: maps sharded 16 ways, whose []byte look-ups
//     allocate nothing, under one policy bounded by bytes: a small FIFO
//     and a ghost in front of a main region evicted by sampled GDSF
//     (store.go, policy.go); the root doc.go records the measurement that
//     chose it.
//   - The disk store ([cache] disk): small objects (a file of at most
//     64 KiB, length known) as records in segment files written and
//     journaled in batches by one appender and reclaimed a segment at a
//     time (diskseg.go, diskappend.go), larger ones a file each under
//     objects/; an append-only journal of fixed-size records as the
//     index, a lock file, and hot files kept open (disk*.go, fdcache.go).
//     A clean close writes the index's image beside the journal, which
//     the next start reads instead of replaying it (diskimage*.go).
//   - Tiers (tiers.go): Find looks in memory, then on disk; Admit decides
//     where a response goes (memory, disk, both or neither) and returns a
//     Writer that stores its body as it is relayed (writer.go), bounded by
//     one in-flight budget; quick_abort says whether a download goes on
//     when its client leaves (quickabort.go).
//   - Collapsed forwarding (cache.go): Join makes concurrent misses for one
//     key a flight with one leader; the leader's Admit (or Land) lets the
//     followers share its response as it arrives, or go on their own; a
//     leader that fails makes its followers elect a new one.
//
// The engine's use of it, per request: Find (and Join) before the
// forward; Admit, Refresh or Invalidate when the answer's head arrives;
// the Writer while its body is relayed; Land when the request ends.
// Purge and Stats serve the admin API, Reconfigure a reload; Drop removes
// an object whose disk file did not check out.
package cache
