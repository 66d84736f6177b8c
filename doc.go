// Package peerd is the root of peerd, a forward HTTP proxy for Squid-style
// cache hierarchies; the command is cmd/peerd and the README explains the
// layout. This file holds the repository-wide dependency test.
//
// Two changes to the starting architecture, and why:
//
//   - dialer/ is a package of its own. Every TCP connect to a peer
//     (requests, CONNECT tunnels, probes) goes through dialer.DialPeer,
//     which reports the outcome to the registry. peers must not do I/O and
//     forwarding must not depend on probes, so the one instrumented dial
//     path lives between them.
//   - forwarding imports selection for its types (Request, Hop, Plan). A
//     Plan is a value iterator so that building one allocates nothing; an
//     interface-typed plan would cost an allocation per request.
package peerd
