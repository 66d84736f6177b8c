package main

// This file holds binary upgrades (contract section 19): on SIGUSR2 the
// running peerd starts the binary at its own path and hands it every
// listening socket (proxy, admin, ICP) through cloudflare/tableflip; the
// new process loads its config and state, opens for business on the
// inherited sockets and says it is ready; only then does the old one stop
// accepting and finish what is in flight. A new process that fails, or is
// not ready within 30 s, is killed, and the old one keeps serving.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cloudflare/tableflip"
	"github.com/sirupsen/logrus"
)

// upgradeTimeout bounds how long a new process may take to be ready.
const upgradeTimeout = 30 * time.Second

// upgrader hands sockets to the next process. Without one (tableflip
// could not start: a second server in one test process), sockets are
// opened the usual way and SIGUSR2 says upgrades are off.
type upgrader struct {
	upg *tableflip.Upgrader
	log logrus.FieldLogger
	mu  sync.Mutex // one upgrade at a time
}

// tableflipOnce guards tableflip.New, which a process may call once.
var tableflipOnce sync.Once

func newUpgrader(pidFile string, log logrus.FieldLogger) *upgrader {
	u := &upgrader{log: log}
	var err error
	created := false
	tableflipOnce.Do(func() {
		created = true
		// The next binary is the file at this one's path: after a package
		// upgrade, the new one (os.Executable drops " (deleted)").
		if exe, e := os.Executable(); e == nil {
			os.Args[0] = exe
		}
		u.upg, err = tableflip.New(tableflip.Options{UpgradeTimeout: upgradeTimeout, PIDFile: pidFile})
	})
	switch {
	case !created:
		log.Debug("binary upgrades are off in this process (a second server)")
	case err != nil:
		log.WithError(err).Warn("binary upgrades are off: sockets cannot be handed over")
		u.upg = nil
	}
	return u
}

// inherited reports whether this process was started by an upgrade.
func (u *upgrader) inherited() bool { return u.upg != nil && u.upg.HasParent() }

// listen opens (or inherits) the TCP listener of role ("proxy",
// "admin"). Sockets are handed over by role and address, so that two
// roles on port 0 (tests) are never taken for each other.
func (u *upgrader) listen(role, addr string) (net.Listener, error) {
	if u.upg == nil {
		return net.Listen("tcp", addr)
	}
	return u.upg.ListenWithCallback("tcp", role+"="+addr, func(network, key string) (net.Listener, error) {
		return net.Listen(network, addrOfKey(key))
	})
}

// addrOfKey is the address part of a role=address key.
func addrOfKey(key string) string {
	_, a, _ := strings.Cut(key, "=")
	return a
}

// listenUDP opens (or inherits) a UDP socket of role.
func (u *upgrader) listenUDP(role, addr string) (*net.UDPConn, error) {
	if u.upg == nil {
		ua, err := net.ResolveUDPAddr("udp", addr)
		if err != nil {
			return nil, err
		}
		return net.ListenUDP("udp", ua)
	}
	pc, err := u.upg.ListenPacketWithCallback("udp", role+"="+addr, func(network, key string) (net.PacketConn, error) {
		return net.ListenPacket(network, addrOfKey(key))
	})
	if err != nil {
		return nil, err
	}
	c, ok := pc.(*net.UDPConn)
	if !ok {
		pc.Close()
		return nil, fmt.Errorf("udp %s: not a UDP socket", addr)
	}
	return c, nil
}

// ready says this process serves: the process that started it (if any)
// stops accepting, and the PID file names this one.
func (u *upgrader) ready() {
	// systemd (Type=notify, NotifyAccess=all) learns that this process
	// is ready and is now the service's main process.
	sdNotify(fmt.Sprintf("READY=1\nMAINPID=%d", os.Getpid()), u.log)
	if u.upg == nil {
		return
	}
	if err := u.upg.Ready(); err != nil {
		u.log.WithError(err).Error("binary upgrade: could not tell the old process this one is ready")
	}
}

// sdNotify sends state to systemd's notification socket, when there is
// one (sd_notify(3)).
func sdNotify(state string, log logrus.FieldLogger) {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return
	}
	if addr[0] == '@' {
		addr = "\x00" + addr[1:] // an abstract socket
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err == nil {
		_, err = c.Write([]byte(state))
		c.Close()
	}
	if err != nil {
		log.WithError(err).Warn("could not notify systemd")
	}
}

// exit is closed when a new process is ready: this one must stop
// accepting and drain. Never closed without an upgrader.
func (u *upgrader) exit() <-chan struct{} {
	if u.upg == nil {
		return nil
	}
	return u.upg.Exit()
}

// upgrade starts the binary at this one's path and waits until it is
// ready (or fails); errors are logged, and this process keeps serving.
func (u *upgrader) upgrade() {
	if u.upg == nil {
		u.log.Warn("binary upgrade asked (SIGUSR2), but upgrades are off in this process")
		return
	}
	if !u.mu.TryLock() {
		u.log.Warn("binary upgrade asked (SIGUSR2) while one is under way; ignored")
		return
	}
	defer u.mu.Unlock()
	u.log.WithField("binary", os.Args[0]).Warn("binary upgrade: starting the new process; this one serves until it is ready")
	if err := u.upg.Upgrade(); err != nil {
		why := err.Error()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			why = "not ready within " + upgradeTimeout.String()
		}
		u.log.WithField("err", why).Error("binary upgrade failed; this process keeps serving")
		return
	}
	u.log.Warn("binary upgrade: the new process is ready; this one stops accepting and finishes in-flight requests")
}

// stop releases the upgrader's resources at the end of the process.
func (u *upgrader) stop() {
	if u.upg != nil {
		u.upg.Stop()
	}
}
