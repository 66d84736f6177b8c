// doc.go holds the repository's documentation of where the code departs
// from the starting architecture, and why (the dependency test is
// internal_deps_test.go).

// Package peerd is the root of peerd, a forward HTTP proxy for Squid-style
// cache hierarchies; the command is cmd/peerd and the README explains the
// layout.
//
// Where the code departs from the starting architecture, and why:
//
//   - dialer/ is a package of its own. Every TCP connect to a peer
//     (requests, CONNECT tunnels, probes) goes through dialer.DialPeer,
//     which reports the outcome to the registry. peers must not do I/O and
//     forwarding must not depend on probes, so the one instrumented dial
//     path lives between them.
//   - forwarding imports selection for its types (Request, Hop, Plan). A
//     Plan is a value iterator so that building one allocates nothing; an
//     interface-typed plan would cost an allocation per request.
//   - peerd owns its HTTP/1.1 data path (issue 11): forwarding serves the
//     proxy port with its own engine on internal/h1, a framing layer of our
//     own, and keeps its own per-hop connection pools. net/http serves only
//     the admin API, and is the oracle h1 is fuzzed against.
//   - internal/procs sizes the runtime's worker threads (GOMAXPROCS) to
//     the load: one while peerd needs less than most of a core, up to one
//     per core as it needs them (issue 21). With a goroutine per
//     connection, a second thread is woken for many requests and spins
//     for work when idle; below a core's load it only costs. In the same
//     bench runs (README, "Threads follow the load"; the figures, with
//     their spread, are in internal/procs's package doc) the same binary
//     with fixed threads cost about 1.2–1.3 × the CPU per request, at the
//     same req/s. An event loop gets this by having
//     one thread until it is busy; this keeps the goroutine model. An
//     operator's GOMAXPROCS turns it off.
//   - access/ is the destination policy ([access]): a pure package that
//     forwarding asks before anything is dialled and again with every
//     resolved address. internal/conf is the config problem type every
//     package's Validate returns, so that cmd/peerd finds lines from the
//     TOML decoder's positions.
//   - hedge_budget bounds hedges away from a tail of slow answers, not
//     away from a parent that has stopped answering: a late head at a
//     parent whose latest answer failed already is hedged outside the
//     budget (issue 47). Under the budget alone, requests waiting on a hung
//     parent waited out read_timeout once the budget was spent, and the
//     parent died later for it. The budget's "0" still means no hedges.
//
// Parts with names, and health beyond the parent's door (issues 62, 63).
//
//   - A peer (peers.Peer) is its identity and settings beside a named
//     health part (peers.Health), not a struct that embeds its counters:
//     *Peer offered 72 methods over 44 fields in 9 files, and kept its
//     liveness twice (the memdb row and a pointer of its own). Now the
//     health part points at its committed memdb row — the one home of its
//     liveness, published by the registry's commit — and everything a peer
//     does reaches the registry as one Outcome (Registry.Observe): the
//     health part makes a verdict of it, and the registry applies it to
//     the row (peers/row.go). A death found by a probe passes through
//     registry.go, health.go (answers.go for an HTTP probe) and row.go.
//   - What a parent says of its own next hop is read in a package of its
//     own, internal/nexthop: forwarding reads it in answers and probes in
//     probe answers, and peers knows no HTTP. Such an answer is never the
//     parent's failure. A destination is marked after three of them in a
//     row, not one: marked at the first, the chaos suite's parents (each
//     saying it for 2 % of the answers of the one origin) cut each other
//     off that origin most of the time, and 44,167 of 44,702 uncacheable
//     GETs of seed 1 failed; at three in a row, none of that.
//   - A config generation is held by its requests (acquire, release: two
//     atomic adds on the generation's counter a request) so that what a
//     reload replaced is closed when the last request holding it is done,
//     not under it.
//
// The engine: fasthttp or our own framing.
//
// Both were measured in one run on the 2-core bench machine (wrk, 16
// keep-alive connections, 512-byte answers from the same parent; CPU from
// /proc/PID/stat over 5 s windows, three alternating runs each):
//
//	a bare fasthttp v1.78 Server + HostClient forwarder   34.5 µs/request, 21.4k req/s
//	peerd on internal/h1 (ACL, plan, health accounting,   32.4 µs/request, 21.3k req/s
//	  Via and X-Forwarded-For, metrics)
//
// so fasthttp buys no speed; and against the safety checks it loses:
//
//   - Parsing: fed the 59 seed vectors of h1's differential fuzz targets,
//     fasthttp accepts 2 that net/http rejects (an invalid %-escape in the
//     target, a leading empty line). h1 accepts none, by construction and
//     by FuzzRequest/FuzzResponse.
//   - Facts: a retry decision needs to know whether the head was written,
//     whether any response byte came back, and whether the connection sat
//     idle. HostClient hides all three behind its own retry logic
//     (RetryIf), as net/http's Transport did; owning the connection makes
//     them plain fields of the attempt.
//   - Streaming: fasthttp buffers whole bodies unless streaming is asked
//     for, and its client does not relay 1xx answers or let a response body
//     be copied to a store while it is relayed (the cache).
//
// So the engine is our own: strict RFC 9112 framing in internal/h1 (heads
// parsed in place into reused structs, no allocation per message), and
// forwarding's connections, pools and deadlines. A keep-alive GET
// allocates nothing (TestKeepAliveGETAllocatesNothing), and the write of
// a message and the wait for the peer's answer share one poll cycle
// (forwarding/rawio.go), which saves the failed read Go's poller would
// otherwise make each time: 6.6% of the CPU per request.
//
// The cache (issue 14).
//
//   - cache/ holds RFC 9111 as pure functions over parsed heads (it
//     imports internal/h1 for them) and the memory store (and, issue 23,
//     the disk store); it never dials.
//     forwarding asks it before planning and hands it responses to keep
//     while they are relayed; a miss or a revalidation goes through the
//     same plan, retries and health accounting as any request.
//
//   - The memory store is one pool of bytes under one policy of our own
//     (cache/policy.go), chosen by measurement (issue 50). It was a
//     segmented LRU sharded 16 ways, each shard a sixteenth of the bytes,
//     chosen over otter v2 (W-TinyLFU) and ristretto v2 because they key
//     by string (a []byte lookup allocates) and ristretto admits
//     asynchronously (a response stored may be missing for the next
//     request). On a real trace (bench/traces/web12, sized) it stayed
//     below a plain LRU: an object over a sixteenth was refused. Now: a
//     small FIFO with a ghost (S3-FIFO's quick demotion) in front of a
//     main region evicted by sampled GDSF with hits over the square root
//     of the size. Replayed through the cache's API at 1 / 5 / 10 % of
//     the trace's bytes (go test ./bench/trace):
//
//     object hits   peerd 53.0 70.1 75.5  LRU 40.8 60.9 69.1  S3-FIFO 43.6 65.6 72.8  GDSF 59.3 74.6 79.5
//     byte hits     peerd 38.6 61.8 69.5  LRU 39.3 58.8 67.2  S3-FIFO 39.2 63.2 70.6  GDSF 29.6 52.2 64.1
//
//     GDSF gets the most object hits by giving up bytes, S3-FIFO the most
//     bytes; the exponent ½ sits between them (1 gave 58.1 / 31.4 at 1 %,
//     in the simulator). Maps stay sharded, looked up by []byte without
//     allocating; a hit bumps two atomics on the object and takes no
//     lock beyond its shard's read lock; admission is synchronous.
//
//   - Collapsed requests stream from the leader's response only when its
//     length is known; a chunked response is shared once whole, and one
//     that outgrows max_object releases its waiters to go on their own
//     rather than cutting them off. Bodies grow as they arrive (issue 20:
//     a whole Content-Length allocated at the head let 40 slow downloads
//     hold 4 MB each outside [cache] memory); followers read the body's
//     slice header under the stream's lock, so a reallocation never tears
//     what they read. Bytes on their way to the store share one budget.
//     A follower watches its own client while it waits, and a leader that
//     fails makes its followers elect a new one rather than all going to
//     the next hop.
//
//   - stale-while-revalidate refreshes behind a stale answer by sending a
//     copy of the request through the proxy itself over an in-memory
//     connection: the refresh is an ordinary request (planned, collapsed,
//     stored, logged), with no second code path for "background" fetches.
//
// The fleet as one cache (issue 44).
//
//   - The owner of a key is a next hop like a sibling, walked first, but
//     it is not in the registry: peers.NewMember makes a Peer the dialer,
//     the pools and the walker take as any other, which the registry
//     never counts against, probes or moves between states. memberlist
//     says whether a member is there; the fleet marks one that failed
//     "not to be asked" for 10 s. Putting members in the registry would
//     have put them in /peers, the planner's views, the state file and
//     every policy, and let connect failures kill a member memberlist
//     still holds alive.
//
//   - Purges go to the members over memberlist's TCP stream (encrypted
//     with the fleet key and signed), not HTTP as the contract says: it
//     is already authenticated both ways and needs no admin token shared
//     between members; owner requests do use HTTP (the proxy port).
//
//   - memberlist rewrites its node structs in place on every alive
//     message (UpdateNode, which publishes a member's load), so the fleet
//     reads members only in memberlist's events, under its lock, and
//     keeps copies.
//
// The fleet (issue 16).
//
//   - fleet/ wraps hashicorp/memberlist and may only mark a peer suspect
//     (peers.Registry.Suspect, history cause "fleet"); it cannot make one
//     dead or alive. A suspect peer sorts behind healthy ones and the
//     prober already probes suspect peers at once, so "suspect, probe
//     now" needed no new path in the prober: the member's own probe
//     decides, which is what keeps a partial partition local.
//
//   - Verdicts are one small JSON message per peer change, broadcast
//     through TransmitLimitedQueue (a newer verdict about the same peer
//     from the same member replaces a queued older one) and relayed once
//     by each member that hears it first; push/pull state exchange is the
//     backstop. A death is also sent to every member at once: measured
//     in make bench (three members, 200 req/s, a parent killed), the
//     gossip tick alone arrives after every member has already tried the
//     dead parent (3 live connects, as without gossip); sent at once,
//     1 (the member that found it).
//
//   - A reload that changes bind, key or node replaces the memberlist
//     instance (a new address is opened before the old is left); only the
//     join list changing joins from the running one. Peer state lives in
//     the registry and is never touched by it.
//
//   - A member cannot tell members apart by the shared key, so each signs
//     its messages with an ed25519 key of its own, published as its
//     memberlist meta (memberlist hands NotifyMsg no sender); a receiver
//     takes only the signer's own verdicts (issue 20).
//
// ICP (issue 17).
//
//   - icp/ owns the codec, the querier and the listener, and imports only
//     peers: the cache it answers from is its one-method Store (the
//     forwarder), and the forwarder sees the querier as a one-method
//     interface. The query result enters selection as a hint (a first hop
//     and its code, and "skip the siblings ICP asked"), so the plan walk,
//     its per-hop liveness re-check and its retry rules stay written once.
//
//   - A peer is waited for only while it is expected to answer: one that
//     never answered and timed out, or that went quiet for
//     dead_peer_timeout (then also marked suspect and probed), is still
//     asked but not waited for until an answer arrives (a late one
//     counts, and feeds the mean RTT behind query_timeout = "auto"). So a
//     dead ICP port costs clients nothing after its first timeout.
//
//   - Queries go out from the [icp] listen address, as Squid sends from
//     its ICP port: Squid drops ICP from its own address, so on one host
//     the operator separates the two by address.
//
// The engine's shape (issues 21 and 42).
//
//   - forwarding/doc.go describes the engine's parts (the transaction,
//     the request and its generation, the attempt, the walker and the
//     generation's hops, the client writer, the cache layer, the fleet as
//     a plan source); what follows departs from the map.
//   - forwarding stays one package. The walls are the types above, which
//     the compiler keeps (no *txn field outside txn.go's type): splitting
//     the upstream side and the client side into packages would export
//     the deadlines, the raw poll-cycle I/O and h1's reused buffers that
//     both sides share, or copy them, for no wall the types do not
//     already give.
//   - cmd/peerd is wiring: config decoding is cmd/peerd/internal/config,
//     the Squid importer cmd/peerd/internal/squidimport, the admin commands
//     cmd/peerd/internal/cli, the socket hand-over
//     cmd/peerd/internal/handover. They import the engine, so they live
//     under cmd/peerd, where nothing below them can import them: internal/
//     is the ground floor only (TestInternalIsTheGroundFloor).
//   - Speed, against d42dd92 in the same runs (three runs of make bench's
//     sections, median of three interleaved rounds each): a CONNECT
//     tunnel, and a long uncached Content-Length body, move between plain
//     TCP connections by splice(2) (net.TCPConn.ReadFrom): 190/186/186
//     µs of CPU per MiB against 542/498/503 (0.35-0.37 x; ATS 645-659,
//     Squid 698-732). A buffered request body goes out with its head in
//     one write, and the wait for the answer shares the poll cycle
//     (rawio.go); one deadline covers the write and that wait. The
//     profile-guided build (cmd/peerd/default.pgo, refreshed as
//     docs/benchmarks.md says) measured within the noise of a -pgo=off
//     build of the same commit: 1.03, 1.00 and 0.95 x its CPU per request
//     in three runs. At saturation peerd is 0.94-0.96 x the goroutine
//     floor and 0.48 (0.48-0.51) x ATS's CPU per request.
//   - The request path's sockets are read, written and peeked with
//     RawSyscall (forwarding/rawio.go): they are non-blocking and never
//     wait, and syscall.Read and Write would wake the runtime's sysmon
//     out of its deep sleep after every idle spell. At about 1,800 req/s
//     (what a ticker-paced client asked for 3,000 sent; the bench paces
//     each request to its due time since 49b2b24) that was over a third
//     of the CPU per request: three interleaved runs of one parent, peerd
//     and an open-loop client, each under perf stat,
//     gave 150 µs (139-152) before and 89 µs (86-94) after, and per
//     request 2.32 futex calls (2.32-2.33), 1.37 nanosleeps (1.36-1.38)
//     and 5.39 context switches (5.29-5.40) became 0.30 (0.28-0.31),
//     0.04 (0.03-0.04) and 2.45 (2.45-2.48).
//   - The I/O model stays a goroutine per client connection. bench/floor
//     measures what that model costs with none of peerd's work, beside
//     an epoll loop's floor, in the bench's own rounds, and the bench
//     splits each child's CPU into user space and kernel. Three runs at
//     b8cff11, at saturation, median and range, µs per request (user +
//     kernel): peerd 6.6 + 19.9, the goroutine floor 3.9 + 21.4, the
//     epoll floor 1.6 + 17.2, ATS 21.0 + 21.9 (at 5862bfa: 6.6 + 18.8,
//     4.0 + 20.8, 1.6 + 18.2, 23.1 + 23.5). peerd's kernel time is close
//     to the epoll floor's (its raw system calls do not wake sysmon), so
//     an event loop would save only part of peerd's user space (the
//     scheduler's and the netpoll wrappers' share, about a quarter of
//     it). The goal of 0.5 x ATS (0.61 here, 0.57-0.62; 0.55 at 5862bfa)
//     leaves 1.1-2.9 µs of user space here and 3.5-6.0 there; the
//     goroutine floor, with none of peerd's work, was 0.58-0.68 x ATS.
//     The user-space cuts between the two sets (shared clock reads, the
//     txn zeroed in place, header kinds by table, a peer's read-mostly
//     fields off the lines requests write; README, "The floors") halved
//     time.Now per request (8.00 to 4.00) and are below what the bench
//     resolves. At 3,000 req/s peerd is 0.78 x the goroutine floor
//     (0.65-0.82) and 0.98 x the epoll one (0.93-1.15).
//   - An idle pooled connection is looked at before it is reused
//     (upConn.look, forwarding/pool.go): bytes a next hop sent unasked
//     close it, never answer the next request. Over TLS the look first
//     reads what the TLS layer holds through dialer.Socket (the TCP
//     connection under every TLS client connection peerd makes, whose
//     reads fail at once while Holding), then peeks the socket under it.
//     Deadlines left from the last request that passed while it sat idle
//     are dropped first, so it is reused within pconn_timeout.
//   - A connect that timed out stays a timeout error (dialer.TimeoutError)
//     from the dialer to failures_by_class, Proxy-Status and the access
//     log, which ends error lines with the RFC 9209 type.
//   - icp asks a peer at the address the registry last reached it at
//     (Observation.Addr), never resolving names under its lock.
//   - The registry's writes report what they changed (peers/changes.go:
//     memdb TrackChanges, as Consul's state store does) to each
//     subscriber's feed; the prober reschedules and the fleet publishes
//     for those peers only, and look at every peer only after a reload
//     (which a feed reports as "all"). Watch stays for WaitVerdicts.
//
// Upgrades and restarts (issue 26).
//
//   - The socket hand-over on SIGUSR2 is our own (cmd/peerd/internal/handover),
//     not cloudflare/tableflip, which was tried first: tableflip keeps a
//     duplicate of every socket it has seen for the life of the process
//     and has no way to drop one, so a reload that moved the proxy port,
//     or a refused reload that had opened a new one, left that port
//     accepting connections nobody served (TestReloadFailsHalfWay caught
//     it). Ours duplicates the sockets only for the upgrade, passes them
//     as extra files with their roles in the environment, waits for the
//     new process's "ready" on a pipe (30 s), and puts its own sockets
//     back in non-blocking mode (os/exec's File.Fd made the shared file
//     description blocking, which left an Accept stuck in the kernel).
//   - Operator state (state_file) is JSON, versioned, written atomically;
//     liveness is never restored: every peer is probed again.
//
// Traces (issue 51).
//
//   - tracing is a package the architecture's map does not have: the
//     OpenTelemetry SDK was not added (a new module is chosen by
//     measurement, and two small files do what peerd needs: W3C trace
//     context, a sampling decision, and OTLP/HTTP with the JSON encoding,
//     which every collector accepts). An untraced request costs a nil
//     test at three points; the CPU at 1 % sampling is not measured yet.
//
// Routes, tiers and rules (issue 24).
//
//   - internal/match is the one matcher of [[rule]] and [[route]]; both
//     tables embed its Spec. Beyond the contract's five match keys it has
//     urls (RE2 on the absolute URI) and dst (destination addresses), and
//     [cache] has refresh_patterns: import-squid needs them to carry
//     url_regex, urlpath_regex, proto, Squid's built-in manager, dst and
//     refresh_pattern over exactly instead of widening a deny to "deny
//     all" (which Debian's default "http_access deny manager" would be).
//   - A [[rule]]'s dst resolves a host name (net.DefaultResolver, within
//     the connect timeout), as Squid's dst does; a [[route]]'s matches
//     literal addresses only (the planner does no I/O), as "dst -n" does.
//     The importer chooses whichever is the safe side for each line.
//   - Routes whose only key is domains share one index (match.DomainIndex),
//     so a plan with 1,000 of them costs one O(labels) look-up; the others
//     are tried in order up to the index's answer.
//
// The disk cache (issue 23).
//
//   - One file per object (head, body, a CRC-32C per 64 KiB block, a
//     checked tail), written under objects/ and then named in an
//     append-only journal of 48-byte records as the index. Measured at 1M
//     objects against go.etcd.io/bbolt as the index (bodies in files
//     either way; a throwaway program, 2-core machine):
//
//     journal: 1 write(2) of 48 B per stored object; load 1M records into
//     the index with its LRU 0.45-0.54 s (1.85-2.2M objects/s,
//     BenchmarkDiskIndexLoad, after chaining a key's variants instead of
//     a slice per key and sizing the map once: 1M allocations became
//     4.4k); 137 B of heap per object.
//     bbolt (three runs, median and range): 22.4 µs (22.2-22.5) per object
//     inserted in commits of 1,000 (fsync'd), 337 µs (307-365) with a
//     commit per object (what visibility at once needs); 101 B on disk
//     per object; open and iterate 1M into a map 389 ms (336-390, 2.57M
//     objects/s), or ~0.1 ms to open and 1.8 µs per Get without a map -
//     but the byte count and the eviction order would still need a walk.
//
//     So bbolt loads faster but costs 10-200x more per stored object and a
//     B+tree we do not need (records are independent: a torn one is
//     skipped, not a corrupt page). A log-structured slab (Squid rock,
//     ATS) writes less metadata but makes eviction a copy and a torn slot
//     a store-wide scan (Squid rock's 4k objects/s rebuild), and its
//     space cannot shrink on a reload; pebble's LSM was not measured: its
//     write amplification is the price bbolt already loses on. One file
//     per object costs an open on a cold hit; hot ones keep their file
//     open (fdcache.go), which made a disk hit 1.25x (1.15-1.32, three
//     runs of bench section 6) a memory hit's CPU. What one file per
//     object does cost is a miss: creating a file took 60-700 µs of CPU
//     on this machine's ext4, so a miss stored on disk costs 236 µs
//     (220-430) against 33.9 µs (32.2-38.2) in memory (Squid's ufs, which
//     also makes a file per object: 506 µs, 379-1,074). A log-structured
//     segment store would not create files; it is the next step if disk
//     misses matter more than the simplicity of this layout.
//
//   - No fsync per object by default: a commit is ordered write(2)s (the
//     file, then its journal record), which a process crash cannot undo;
//     a power loss can lose recent objects and is caught by the checksums
//     on read. fsync was measured (three runs, one writer, 2,000 small
//     files each way): it took a file from 476 µs (402-828) to 698 µs
//     (655-711) of wall time; the CPU, 500 µs (425-875) against 555
//     (525-565), is mostly this machine creating the file. A flush per
//     stored response costs time on any disk, so it is a choice,
//     disk_fsync, off by default.
//
//   - A disk-only object (over max_object_in_memory) is visible once
//     committed; the relay waits for that (at most 2 s) after the client
//     has the whole response, so the next request on the connection finds
//     it (cache-tests through the binary with bodies only on disk: 131/131).
//
//   - The lock file is flock(2)ed: a process started by a binary upgrade
//     waits for it (the old one releases it when it hands over); any
//     other second peerd fails at start.
package peerd
