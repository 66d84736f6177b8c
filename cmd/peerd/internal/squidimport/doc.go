// doc.go holds the squidimport package's documentation.

// Package squidimport is peerd import-squid FILE: an equivalent peerd TOML for a squid.conf.
// cache_peer lines and their options become [[peer]] tables; the options
// that pick parents (round-robin, weighted-round-robin, carp, sourcehash)
// become [selection] policy; never_direct/always_direct/prefer_direct,
// http_port, visible_hostname, the timeouts, forward_max_tries, cache_mem,
// maximum_object_size and pconn_timeout their keys; importproxy.go holds
// the other directives that are one key each. Whatever cannot be carried
// over is listed, as TOML comments in the output and on stderr.
package squidimport
