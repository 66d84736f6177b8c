package testbed

// This file holds running a real Squid on loopback for tests and the bench.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Squid is a real Squid in the foreground on a loopback port, with a
// generated config: memory cache only, logs in its own directory, clients
// from localhost only.
type Squid struct {
	Name string
	Addr string
	Dir  string
	Conf string
	bin  string
	cmd  *exec.Cmd
	done chan struct{}
}

// SquidOptions shape a generated squid.conf.
type SquidOptions struct {
	// Name is its visible_hostname (it must differ between chained
	// Squids, or they take each other for a loop).
	Name string
	// Extra lines are appended (cache_peer, never_direct, ...).
	Extra string
	// NoAccessLog turns the access log off (for the benchmark: logging is
	// part of Squid's cost, but not of the one measured).
	NoAccessLog bool
	// TLSCert and TLSKey, when set, make Squid listen only on an
	// https_port (a TLS proxy port) with this certificate.
	TLSCert, TLSKey string
	// OwnAccess: Extra holds every http_access line Squid gets (none
	// may be one of the cases); otherwise "allow localhost, deny all"
	// are appended.
	OwnAccess bool
}

// StartSquid starts bin in dir (created if missing; Squid runs as the
// proxy user when started as root, so dir is made world-writable).
func StartSquid(bin, dir string, o SquidOptions) (*Squid, error) {
	s, err := writeSquid(bin, dir, o)
	if err != nil {
		return nil, err
	}
	return s, s.Start()
}

// StartSquidStore is StartSquid for a config with a cache_dir: Squid
// makes its store (squid -z) before it starts.
func StartSquidStore(bin, dir string, o SquidOptions) (*Squid, error) {
	s, err := writeSquid(bin, dir, o)
	if err != nil {
		return nil, err
	}
	if out, err := exec.Command(bin, "-z", "-N", "-n", "peerdbed"+s.Port(), "-f", s.Conf).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("squid -z: %v\n%s", err, out)
	}
	return s, s.Start()
}

// writeSquid writes the config of a Squid on a free loopback port.
func writeSquid(bin, dir string, o SquidOptions) (*Squid, error) {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, err
	}
	os.Chmod(dir, 0o777)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	s := &Squid{Name: o.Name, Addr: addr, Dir: dir, Conf: filepath.Join(dir, "squid.conf"), bin: bin}
	user := ""
	if os.Geteuid() == 0 {
		user = "cache_effective_user proxy\n"
	}
	access := fmt.Sprintf("access_log stdio:%s/access.log", dir)
	if o.NoAccessLog {
		access = "access_log none"
	}
	tail := "http_access allow localhost\nhttp_access deny all\n"
	if o.OwnAccess {
		tail = ""
	}
	port := "http_port " + addr
	if o.TLSCert != "" {
		port = fmt.Sprintf("https_port %s tls-cert=%s tls-key=%s", addr, o.TLSCert, o.TLSKey)
	}
	conf := fmt.Sprintf(`%s
pid_filename %s/squid.pid
cache_log %s/cache.log
%s
cache_store_log none
coredump_dir %s
cache_mem 16 MB
shutdown_lifetime 0 seconds
visible_hostname %s
dns_nameservers 127.0.0.1
max_filedescriptors 16384
%s%s
%s`, port, dir, dir, access, dir, o.Name, user, o.Extra, tail)
	if err := os.WriteFile(s.Conf, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return s, nil
}

// Stop SIGTERMs Squid and waits for it to exit (a clean shutdown: a ufs
// store's swap.state is written).
func (s *Squid) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.Kill()
	}
	os.Remove(filepath.Join(s.Dir, "squid.pid"))
}

// Port is Squid's port.
func (s *Squid) Port() string { _, p, _ := net.SplitHostPort(s.Addr); return p }

// Pid is the process id of the running Squid.
func (s *Squid) Pid() int { return s.cmd.Process.Pid }

// Start (re)starts Squid and waits (at most 30s) until it listens.
func (s *Squid) Start() error {
	s.cmd = exec.Command(s.bin, "-N", "-n", "peerdbed"+s.Port(), "-f", s.Conf)
	out, _ := os.Create(filepath.Join(s.Dir, "stderr.log"))
	s.cmd.Stdout, s.cmd.Stderr = out, out
	if err := s.cmd.Start(); err != nil {
		return err
	}
	s.done = make(chan struct{})
	go func() { s.cmd.Wait(); out.Close(); close(s.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("squid %s exited at start:\n%s", s.Name, s.Logs())
		default:
		}
		if time.Now().After(deadline) {
			return errors.New("squid " + s.Name + " not listening after 30s:\n" + s.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill SIGKILLs Squid (no goodbye: a crash, as far as peers can tell).
func (s *Squid) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	s.cmd.Process.Kill()
	<-s.done
	os.Remove(filepath.Join(s.Dir, "squid.pid"))
}

// Logs returns Squid's stderr and cache.log.
func (s *Squid) Logs() string {
	a, _ := os.ReadFile(filepath.Join(s.Dir, "stderr.log"))
	b, _ := os.ReadFile(filepath.Join(s.Dir, "cache.log"))
	return string(a) + string(b)
}

// AccessLog returns Squid's access.log lines for requests. Connections
// that ended before any header (peerd's TCP probes, readiness checks) are
// left out.
func (s *Squid) AccessLog() []string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "access.log"))
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) != "" && !strings.Contains(l, "error:transaction-end-before-headers") {
			out = append(out, l)
		}
	}
	return out
}
