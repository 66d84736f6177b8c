package testbed

// This file holds building and running peerd for tests and the bench, and
// reading its admin API.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Build compiles peerd into dir and returns the binary's path; race adds
// the race detector.
func Build(dir string, race bool) (string, error) {
	bin := filepath.Join(dir, "peerd")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "github.com/peerd/peerd/cmd/peerd")...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return bin, cmd.Run()
}

// Peerd is a running peerd process.
type Peerd struct {
	Cmd    *exec.Cmd
	Dir    string
	Config string // the config file's path
	Proxy  string // host:port, read from the "peerd serving" line
	Admin  string

	mu     sync.Mutex
	log    bytes.Buffer
	exited chan struct{}
	err    error // how it exited, once exited is closed
}

// The "peerd serving" line, in text or JSON format, and its addresses.
var (
	servingLine = regexp.MustCompile(`msg"?[=:]"peerd serving"`)
	adminAddr   = regexp.MustCompile(`\badmin"?[=:]"?([0-9.:\[\]]+)`)
	proxyAddr   = regexp.MustCompile(`\bproxy"?[=:]"?([0-9.:\[\]]+)`)
)

// StartPeerd writes config into dir and runs bin on it, waiting (at most
// 30s) for it to serve. Listen addresses should be loopback port 0.
func StartPeerd(bin, dir, config string, env ...string) (*Peerd, error) {
	p := &Peerd{Dir: dir, Config: filepath.Join(dir, "peerd.toml"), exited: make(chan struct{})}
	if err := os.WriteFile(p.Config, []byte(config), 0o644); err != nil {
		return nil, err
	}
	p.Cmd = exec.Command(bin, "-config", p.Config)
	p.Cmd.Env = append(os.Environ(), env...)
	stderr, err := p.Cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	p.Cmd.Stdout = io.Discard
	if err := p.Cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		var once sync.Once
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			if p.log.Len() < 64<<20 {
				p.log.WriteString(line + "\n")
			}
			p.mu.Unlock()
			if servingLine.MatchString(line) {
				a, x := adminAddr.FindStringSubmatch(line), proxyAddr.FindStringSubmatch(line)
				once.Do(func() {
					if a != nil && x != nil {
						p.Admin, p.Proxy = a[1], x[1]
					}
					close(ready)
				})
			}
		}
	}()
	go func() { p.err = p.Cmd.Wait(); close(p.exited) }()
	select {
	case <-ready:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("peerd exited before serving:\n%s", p.Logs())
	case <-time.After(30 * time.Second):
		p.Stop()
		return nil, errors.New("peerd not serving after 30s")
	}
}

// Exited is closed when the process has exited.
func (p *Peerd) Exited() <-chan struct{} { return p.exited }

// Err is how the process exited (nil for status 0); valid once Exited is
// closed.
func (p *Peerd) Err() error {
	<-p.exited
	return p.err
}

// Logs returns what peerd wrote to stderr.
func (p *Peerd) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// Signal sends s to the process.
func (p *Peerd) Signal(s os.Signal) { p.Cmd.Process.Signal(s) }

// Stop sends SIGTERM and waits (at most 15s, then kills).
func (p *Peerd) Stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		p.Cmd.Process.Kill()
		<-p.exited
	}
}

// Client returns an HTTP client that uses peerd as its proxy.
func (p *Peerd) Client(timeout time.Duration) *http.Client {
	u, _ := url.Parse("http://" + p.Proxy)
	return &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyURL(u), MaxIdleConnsPerHost: 64, DisableCompression: true},
		Timeout:   timeout,
	}
}

// AdminJSON GETs an admin path into v.
func (p *Peerd) AdminJSON(path string, v any) error {
	resp, err := http.Get("http://" + p.Admin + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// Stats are a process's resources at one moment.
type Stats struct {
	RSSMiB     float64 `json:"rss_mib"`
	FDs        int     `json:"fds"`
	Goroutines int     `json:"goroutines"`
}

// Stats reads RSS and open descriptors from /proc and the goroutine count
// from peerd's /metrics.
func (p *Peerd) Stats() Stats {
	pid := p.Cmd.Process.Pid
	st := Stats{RSSMiB: RSSMiB(pid)}
	if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		st.FDs = len(fds)
	}
	if resp, err := http.Get("http://" + p.Admin + "/metrics"); err == nil {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				st.Goroutines = int(f)
			}
		}
		resp.Body.Close()
	}
	return st
}

// RSSMiB is a process's resident set size (0 when it cannot be read).
func RSSMiB(pid int) float64 { return statusMiB(pid, "VmRSS:") }

// PeakRSSMiB is a process's peak resident set size, VmHWM (0 when it
// cannot be read).
func PeakRSSMiB(pid int) float64 { return statusMiB(pid, "VmHWM:") }

// statusMiB reads one kB field of /proc/PID/status, in MiB.
func statusMiB(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// CPU is a process's user+system CPU time, from /proc/PID/stat.
func CPU(pid int) time.Duration {
	u, k := CPUSplit(pid)
	return u + k
}

// CPUSplit is a process's CPU time in user space and in the kernel, from
// /proc/PID/stat (zero when the process is gone).
func CPUSplit(pid int) (user, kernel time.Duration) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	// The command name (field 2) may hold spaces: count from its ")".
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	tick := time.Second / time.Duration(clkTck())
	return time.Duration(ut) * tick, time.Duration(st) * tick
}

var clkTck = sync.OnceValue(func() int64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if n, perr := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil && perr == nil && n > 0 {
		return n
	}
	return 100
})
