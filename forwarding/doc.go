// Package forwarding is peerd's forward proxy: its own HTTP/1.1 engine on
// the proxy port (client connections, keep-alive, pipelining, limits and
// timeouts), the cache as a layer in front of the forwarder, the one walk
// over a selection plan with one explicit attempt per hop (which owns its
// connection), the per-hop connection pools, CONNECT and Upgrade tunnels,
// error answers and the access log.
//
// An attempt's progress (dialling, connected, head written, body written,
// response head read, first byte sent to the client) is a plain field set
// where each step happens; one pure function, decide, turns the class of a
// failed attempt and the request's facts into "answer", "next hop" or "same
// hop on a fresh connection":
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
//	committed         a response byte reached the client: never redone.
//
// # The engine's parts
//
//   - forwarding keeps one transaction per request (txn.go) as the one
//     place that knows every part; no part points back at it. A request
//     (request.go) is what every part reads: its parsed head, its body,
//     its facts, and the config generation it is served under (gen.go:
//     [proxy], policy, rules, auth, routes and peers, cache, access log,
//     built whole by a reload and stored with one atomic pointer; a
//     request loads it once). Before, a reload swapped about ten pieces
//     one at a time and one request read the policy three times
//     (TestReloadMidRequestKeepsItsGeneration fails on d42dd92).
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
//     (hedge or wait), a broken answer, a status retry, a CONNECT reply.
//     The connect race and the request hedge are one race (race.go): its
//     racers report on one channel, and what reports after it is over is
//     disposed of by race.dispose (pooled if it carried nothing, else
//     closed, its slot freed); a hedge's original that lost is closed
//     where the hedge is decided (walker.hedge, hedgeWon).
//   - The client writer (clientwrite.go) is the only way to the client:
//     every write to the client connection, the tunnel's included, is in
//     that file. It writes one final head per request (a second is an
//     error the caller handles: TestHeadGuardRace), and whether the client
//     is gone is one field, set in one place.
//   - The cache is not hooks: its steps come before the forward (a lookup
//     that may answer), during it (the sink the answer is relayed through:
//     a decorator of the client writer that stores what passes, and may
//     answer from the store instead) and after it (stale_if_dead). It
//     reads the request and writes to the client writer; it has no
//     pointer to the transaction either.
//   - The fleet is a plan source (fleet.go): a request the fleet may share
//     is marked (selection.Request.Shared), the generation's routing
//     (fleet.Routing around the planner's) leads its plan with the key's
//     owner, and the owner's hop carries its signature and key
//     (selection.Hop.Leads). The walker walks it as any hop: an owner's
//     connect and answer go to the accounting every hop goes to (judge;
//     fleet.Accounting, wrapped around the registry, keeps the members'
//     part), member requests are verified by the generation's
//     authenticator of members (Members), and only the cache's hot-copy
//     admission asks whether a peer is a member.
package forwarding
