package main

// This file holds the start-up check of the descriptor limit against
// max_connections: each client connection is a descriptor and each
// tunnel two, so a limit below what the connections allowed need would
// refuse clients peerd claims to take (the unit's LimitNOFILE fits the
// default; a shell's ulimit -n often does not).

import (
	"syscall"

	"github.com/sirupsen/logrus"
)

// filesSpare is what peerd needs besides its clients' connections: the
// listeners, the logs, the disk store's files, pools to the parents.
const filesSpare = 1024

// warnFewFiles says (at info level: a test's or a shell's limit is often
// lower, and running out is itself warned of, counted and in /readyz)
// when the descriptor limit cannot hold max_connections tunnels (two
// descriptors each).
func (s *server) warnFewFiles() {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return
	}
	need := 2*uint64(s.cfg.Proxy.MaxConnections) + filesSpare
	if lim.Cur < need {
		s.log.WithFields(logrus.Fields{"limit": lim.Cur, "needed": need, "max_connections": s.cfg.Proxy.MaxConnections}).
			Info("the file descriptor limit is below what max_connections needs (two per tunnel): clients will be refused for want of descriptors before max_connections; raise LimitNOFILE (ulimit -n), or lower max_connections")
	}
}
