// Package handover holds binary upgrades (contract section 19): on SIGUSR2 the
// running peerd starts the binary at its own path and hands it every
// listening socket (proxy, TLS, admin, ICP); the new process loads its
// config and state, opens for business on the inherited sockets and says
// it is ready. Both then accept on the shared sockets for upgradeGrace;
// only a new process still running at its end is trusted, and the old one
// stops accepting and finishes what is in flight. A new process that
// fails, is not ready within 30 s (it is killed) or dies within the grace
// (the old one takes the PID file and systemd's main PID back) leaves the
// old one serving. peerd as PID 1 (a container's init) refuses the
// upgrade: its exit would end the container, and the new process with it.
//
// The hand-over is our own (exec with the sockets as extra files, a pipe
// for "ready"), not cloudflare/tableflip: tableflip keeps a duplicate of
// every socket it has seen for the life of the process, with no way to
// drop one, so a reload that moves or refuses a listener would leave the
// old port accepting connections that nobody serves (TestReloadFailsHalfWay
// found it). Here the sockets are duplicated only for the upgrade, and
// the duplicates are closed right after.
package handover

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/peerd/peerd/internal/atomicfile"
)

// Timeout bounds how long a new process may take to be ready;
// upgradeGrace is how long it must then keep running before this one lets
// go of the listeners.
const (
	Timeout      = 30 * time.Second
	upgradeGrace = 5 * time.Second
)

// Environment of a process started by an upgrade: its inherited sockets
// (role=fd,...) and the fd it writes "ready" to.
const (
	envSockets = "PEERD_UPGRADE_SOCKETS"
	envReady   = "PEERD_UPGRADE_READY"
)

// Upgrader hands sockets to the next process.
type Upgrader struct {
	log     logrus.FieldLogger
	pidFile string
	// sockets are what this process inherited, by role; taken once.
	mu      sync.Mutex
	sockets map[string]*os.File
	readyFd *os.File
	// current returns the listening sockets to hand over now, by role.
	Current func() map[string]FileConn
	// State returns the operator state to hand over now (state.go).
	State func() []byte
	// stateIn is the state pipe from the old process (a new one's);
	// stateOut the pipe to the new process, with firstSent closed once
	// its first frame is written (an old one's).
	stateIn   *os.File
	stateOut  *os.File
	firstSent chan struct{}
	exitC     chan struct{}
	busy      sync.Mutex
}

// FileConn is a socket that can give a duplicate of its descriptor.
type FileConn interface{ File() (*os.File, error) }

func New(pidFile string, log logrus.FieldLogger) *Upgrader {
	u := &Upgrader{log: log, pidFile: pidFile, sockets: map[string]*os.File{}, exitC: make(chan struct{})}
	if spec := os.Getenv(envSockets); spec != "" {
		for _, kv := range strings.Split(spec, ",") {
			role, fd, ok := strings.Cut(kv, "=")
			n, err := strconv.Atoi(fd)
			if ok && err == nil && n > 2 {
				u.sockets[role] = os.NewFile(uintptr(n), "peerd-"+role)
			}
		}
		os.Unsetenv(envSockets)
	}
	if fd, err := strconv.Atoi(os.Getenv(envReady)); err == nil && fd > 2 {
		u.readyFd = os.NewFile(uintptr(fd), "peerd-ready")
		os.Unsetenv(envReady)
		u.stateIn = stateFromEnv()
	}
	return u
}

// inherited reports whether this process was started by an upgrade.
func (u *Upgrader) Inherited() bool { return u.readyFd != nil }

// take returns the inherited socket of role, once.
func (u *Upgrader) take(role string) *os.File {
	u.mu.Lock()
	defer u.mu.Unlock()
	f := u.sockets[role]
	delete(u.sockets, role)
	return f
}

// listen returns the inherited listener of role when it listens where
// addr says (port 0 matches any), else a new one.
func (u *Upgrader) Listen(role, addr string) (net.Listener, error) {
	if f := u.take(role); f != nil {
		ln, err := net.FileListener(f)
		f.Close()
		if err == nil && sameAddr(ln.Addr().String(), addr) {
			return ln, nil
		}
		if ln != nil {
			ln.Close()
		}
	}
	return net.Listen("tcp", addr)
}

// listenUDP is listen for a UDP socket.
func (u *Upgrader) ListenUDP(role, addr string) (*net.UDPConn, error) {
	if f := u.take(role); f != nil {
		pc, err := net.FilePacketConn(f)
		f.Close()
		if c, ok := pc.(*net.UDPConn); err == nil && ok && sameAddr(c.LocalAddr().String(), addr) {
			return c, nil
		}
		if pc != nil {
			pc.Close()
		}
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	return net.ListenUDP("udp", ua)
}

// sameAddr reports whether a socket bound to have serves the configured
// want (a port 0 in want matches any port).
func sameAddr(have, want string) bool {
	hh, hp, err1 := net.SplitHostPort(have)
	wh, wp, err2 := net.SplitHostPort(want)
	if err1 != nil || err2 != nil {
		return false
	}
	hip, wip := net.ParseIP(hh), net.ParseIP(wh)
	hostOK := hh == wh || (hip != nil && wip != nil && hip.Equal(wip)) || (wh == "" && hip != nil && hip.IsUnspecified())
	return hostOK && (wp == "0" || hp == wp)
}

// ready says this process serves: the process that started it stops
// accepting; the PID file and systemd name this one.
func (u *Upgrader) Ready() {
	// Sockets inherited but not wanted (the config moved them) go.
	u.mu.Lock()
	for role, f := range u.sockets {
		f.Close()
		delete(u.sockets, role)
	}
	u.mu.Unlock()
	if u.pidFile != "" {
		if err := atomicfile.Write(u.pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
			u.log.WithError(err).Error("pid_file not written")
		}
	}
	// systemd (Type=notify, NotifyAccess=all) learns that this process
	// is ready and is now the service's main process.
	SDNotify(fmt.Sprintf("READY=1\nMAINPID=%d", os.Getpid()), u.log)
	if u.readyFd != nil {
		u.readyFd.Write([]byte("ready\n"))
		u.readyFd.Close()
		u.readyFd = nil
	}
}

// exit is closed when a new process is ready: this one must stop
// accepting and drain.
func (u *Upgrader) Exit() <-chan struct{} { return u.exitC }

// upgrade starts the binary at this one's path with the listening
// sockets and waits until it is ready (or fails); errors are logged, and
// this process keeps serving.
func (u *Upgrader) Upgrade() {
	if !u.busy.TryLock() {
		u.log.Warn("binary upgrade asked (SIGUSR2) while one is under way; ignored")
		return
	}
	defer u.busy.Unlock()
	select {
	case <-u.exitC:
		return // already handed over
	default:
	}
	if os.Getpid() == 1 {
		u.log.Error("binary upgrade refused: peerd is PID 1 (a container's init), and its exit would end the container with the new process; restart the container to upgrade")
		return
	}
	bin, err := os.Executable() // the file at this one's path (" (deleted)" dropped)
	if err != nil {
		bin = os.Args[0]
	}
	u.log.WithField("binary", bin).Warn("binary upgrade: starting the new process; this one serves until it is ready")
	exited, err := u.start(bin)
	if err != nil {
		u.dropState()
		u.log.WithField("err", err.Error()).Error("binary upgrade failed; this process keeps serving")
		return
	}
	u.log.WithField("grace", upgradeGrace.String()).Warn("binary upgrade: the new process is ready; both serve until it has run for the grace period")
	select {
	case werr := <-exited:
		u.dropState()
		u.reclaim()
		u.log.WithField("err", fmt.Sprint(werr)).Error("binary upgrade failed: the new process exited after it said it was ready; this process keeps serving")
		return
	case <-time.After(upgradeGrace):
	}
	u.log.Warn("binary upgrade: the new process has served for the grace period; this one stops accepting and finishes in-flight requests")
	close(u.exitC)
}

// reclaim makes this process the one that serves again: the PID file and
// systemd's main PID name it (a new process that said ready named itself).
func (u *Upgrader) reclaim() {
	if u.pidFile != "" {
		if err := atomicfile.Write(u.pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
			u.log.WithError(err).Error("pid_file not written")
		}
	}
	SDNotify(fmt.Sprintf("MAINPID=%d", os.Getpid()), u.log)
}

// start runs bin with the sockets and waits for its "ready"; exited
// then reports the new process's end.
func (u *Upgrader) start(bin string) (exited <-chan error, err error) {
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close() // the duplicates: the child has its own
		}
	}()
	var spec []string
	for role, c := range u.Current() {
		f, err := c.File()
		if err != nil {
			return nil, fmt.Errorf("socket %s: %w", role, err)
		}
		files = append(files, f)
		spec = append(spec, fmt.Sprintf("%s=%d", role, 3+len(files)-1))
	}
	stateR, stateW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	files = append(files, stateR)
	stateFd := 3 + len(files) - 1
	readyR, readyW, err := os.Pipe()
	if err != nil {
		stateW.Close()
		return nil, err
	}
	defer readyR.Close()
	files = append(files, readyW)
	cmd := exec.Command(bin, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = files
	cmd.Env = append(os.Environ(), envSockets+"="+strings.Join(spec, ","), fmt.Sprintf("%s=%d", envReady, 3+len(files)-1),
		fmt.Sprintf("%s=%d", envState, stateFd))
	err = cmd.Start()
	// os/exec put the sockets in blocking mode (File.Fd does), and a
	// duplicate shares that flag with this process's own sockets: an
	// Accept stuck in a blocking syscall would neither see the listener
	// close nor let this process drain. They go back to non-blocking.
	for _, f := range files[:len(files)-2] {
		if rc, rerr := f.SyscallConn(); rerr == nil {
			rc.Control(func(fd uintptr) { syscall.SetNonblock(int(fd), true) })
		}
	}
	if err != nil {
		stateW.Close()
		return nil, fmt.Errorf("cannot start %s: %w", bin, err)
	}
	readyW.Close()
	files = files[:len(files)-1]
	// The operator state as the upgrade starts: the new process reads it
	// before it serves (a drain made a moment ago is in it).
	u.stateOut, u.firstSent = stateW, make(chan struct{})
	go func(first chan struct{}) {
		defer close(first)
		stateW.SetWriteDeadline(time.Now().Add(Timeout))
		if err := u.sendState(stateW); err != nil {
			u.log.WithField("err", err.Error()).Warn("binary upgrade: the operator state was not handed to the new process (it reads the state file)")
		}
	}(u.firstSent)
	result := make(chan error, 2)
	go func() {
		buf := make([]byte, 16)
		n, _ := readyR.Read(buf)
		if strings.HasPrefix(string(buf[:n]), "ready") {
			result <- nil
			return
		}
		result <- errors.New("the new process ended before it was ready")
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-result:
		if err == nil {
			return done, nil
		}
		select {
		case werr := <-done:
			return nil, fmt.Errorf("the new process exited before it was ready: %v", werr)
		case <-time.After(time.Second):
			cmd.Process.Kill()
			return nil, err
		}
	case werr := <-done:
		return nil, fmt.Errorf("the new process exited before it was ready: %v", werr)
	case <-time.After(Timeout):
		cmd.Process.Signal(syscall.SIGKILL)
		return nil, fmt.Errorf("the new process was not ready within %s; killed", Timeout)
	}
}

// SDNotify sends state to systemd's notification socket, when there is
// one (sd_notify(3)).
func SDNotify(state string, log logrus.FieldLogger) {
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

// Started tells whether this process was started by an upgrade (before
// New reads and clears the environment it was handed).
func Started() bool { return os.Getenv(envReady) != "" }
