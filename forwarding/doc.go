// doc.go holds the forwarding package's documentation: its parts, and
// where they depart from the starting design, and why.

// Package forwarding is peerd's forward proxy: its own HTTP/1.1 engine on
// the proxy port (client connections, keep-alive, pipelining, limits and
// timeouts), the cache as a layer in front of the forwarder, the one walk
// over a selection plan with one explicit attempt per hop (which owns its
// connection), the per-hop connection pools, CONNECT and Upgrade tunnels,
// error answers and the access log.
//
// An attempt's progress (dialling, connected, head written, body written,
// response head read, first byte sent to the client) is a plain field set
// where each step happens; one function, decide, turns the class of a
// step, the request's facts and what it reads of the walk (the retry
// budget, a lead hop, whether the plan has a hop left) into "answer",
// "next hop" (free, or a retry that spends the budget), "same hop on a
// fresh connection", "hedge", "wait" or "no answer":
//
//	connect failure   no connection; counted against the peer by the
//	                  dialer; always retried on the next hop.
//	stale connection  a pooled connection the peer had closed: nothing
//	                  reached it; redone on a fresh connection, for free.
//	before write      a connection, but the head was not written whole:
//	                  nothing usable reached the hop; retried, free.
//	after write       written, no (whole) response: retried only when the
//	                  request is idempotent with a buffered body, within the
//	                  retry budget.
//	timeout           written, no response byte within read_timeout:
//	                  retriable exactly when 504 is (retry_on_status).
//	next hop failed   the hop answered that the request never reached the
//	                  origin (its own next hop failed): never the hop's
//	                  failure; retried for any request whose body peerd
//	                  holds, within the retry budget.
//	committed         a response byte reached the client: never redone.
//
// # The engine's parts
//
//   - forwarding keeps one transaction per request (txn.go) as the one
//     place that knows every part; no part points back at it. A request
//     (request.go) is what every part reads: its parsed head, its body,
//     its facts, and the config generation it is served under (gen.go:
//     [proxy], policy, rules, auth, routes and peers, the cache with its
//     settings, the access log with its format, built whole by a reload
//     and stored with one atomic pointer; a request holds it from its head
//     to its end, acquire and release). Before, a reload swapped about ten
//     pieces one at a time and one request read the policy three times
//     (TestReloadMidRequestKeepsItsGeneration fails on d42dd92); then the
//     access log's format and the cache's settings still changed in place,
//     and the old cache was closed under requests that held it. A replaced
//     generation ends when its last request is done, and Reconfigure
//     returns the channel that says so: the reload closes what it alone
//     used then (TestReloadEndsTheOldGenerationWithItsLastRequest).
//   - The attempt (attempt.go, roundtrip.go) is a round trip: it gets the
//     request, a hop and a connection, owns the connection to its release,
//     and ends with a response head and a body reader or a classified
//     error; 1xx answers go to the client side it is given (as Caddy's
//     Got1xxResponse). It has no pointer to the transaction.
//   - The walker (walk.go) is the only part that advances the plan, and
//     it owns every attempt in flight. Neither it, its attempts nor the
//     cache layer holds the Proxy: what they take from the process (the
//     accounting, dialling, pools, budgets, hedges, stalls, metrics and
//     the fleet) is the generation's hops value (hops.go), with that
//     generation's [health] settings, so a request walks under one
//     generation to its end, and a test drives the walker with a fake
//     hops alone (walk_test.go). decide (attempt.go) is the one
//     function that says what follows every step: a full peer, a connect
//     that failed (alone or in a race), a sibling's miss, a late head
//     (hedge, wait with the parent suspect, or wait), a broken answer, a
//     status retry, an answer that never reached the origin, a CONNECT
//     reply. walker.walk is connect, exchange, classify, decide; what
//     decide needs to know of the walk is a fact it reads (a step: a lead
//     hop, the budget, whether the plan has a hop left, asked of a copy of
//     the plan), never an override after it (TestDecide).
//     The connect race and the request hedge are one race (race.go): its
//     racers report on one channel, and what reports after it is over is
//     disposed of by race.dispose (pooled if it carried nothing, else
//     closed, its slot freed); a hedge's original that lost is closed
//     where the hedge is decided (walker.hedge, hedgeWon).
//   - The client writer (clientwrite.go) is the only way to the client:
//     every write to the client connection is there (a tunnel's relay,
//     after the writer's hello, in tunnelrun.go). It writes one final head per request (a second is an
//     error the caller handles: TestHeadGuardRace), and it alone decides
//     whether the connection carries another request and whether the
//     client is gone, from what it is told
//     (TestClientWriterDecidesKeepAlive).
//   - An idle client costs its socket (park.go): a keep-alive connection
//     with no request for 200 ms gives its clientConn (buffers and
//     transaction) back to a free list, its goroutine ends, and it waits
//     for readability in peerd's own epoll set (parkloop.go: no goroutine
//     and no buffer each); the bytes of a next request take a goroutine
//     and a clientConn again (clientConn.loop). A tunnel sheds its
//     readers' and writers' buffers once what either side sent is taken;
//     a CONNECT's tunnel is detached from the goroutine that served it
//     (it ends the transaction itself), and each of its directions idle
//     for 200 ms waits in the same epoll set (tunnelrun.go: two
//     descriptors, no goroutine, no buffer, no pipe). A wave of connections gone
//     idle has its memory returned at once (connSet.returnIdleMemory).
//     Running out of descriptors is peerd's own failure (files.go):
//     counted, logged, in /readyz, never a parent's.
//   - The cache is not hooks: its steps come before the forward (a lookup
//     that may answer), during it (the sink the answer is relayed through:
//     a decorator of the client writer that stores what passes, and may
//     answer from the store instead) and after it (stale_if_dead). It
//     reads the request and writes to the client writer; it has no
//     pointer to the transaction either.
//   - A hop's role (role.go) is what it does that depends on what it is
//     asked as: a peer as itself (peerRole), or what a plan source made it
//     — the fleet's owner of a key (fleet.OwnerRole). The engine calls the
//     role at named points (the fields its request carries, how a final
//     answer is classed, what it is judged about, how much is read before
//     relaying, how the cache keeps it) and never asks which role it is.
//   - The fleet is a plan source (fleet.go): a request the fleet may share
//     is marked (selection.Request.Shared), the generation's routing
//     (fleet.Routing around the planner's) leads its plan with the key's
//     owner's hop, which carries its role. The walker walks it as any hop:
//     an owner's connect and answer go to the accounting every hop goes to
//     (fleet.Accounting, wrapped around the registry, keeps the members'
//     part), and a request another member signed is vouched for (vouch:
//     it passed [proxy] allow and [[rule]] there).
package forwarding
