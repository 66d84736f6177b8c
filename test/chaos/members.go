package main

// This file holds the fleet under test: three peerd processes (a, b, c)
// sharing their caches in front of the three parents. Member a is the
// one stalled, reloaded and upgraded (its serving process is read from
// its pid file, which an upgrade changes); member c is the one killed (or stopped) and
// started again. Each member's stderr goes to a log file in its folder.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

var fleetKey = base64.StdEncoding.EncodeToString([]byte("peerd-chaos-fleet-key-32-bytes!!"))

// member is one peerd of the fleet.
type member struct {
	name    string
	dir     string
	bin     string // its own copy of the binary (an upgrade replaces it)
	cfgPath string
	pidFile string
	logPath string
	gossip  string
	join    []string
	parents []*parent
	gen     int    // config generation (reloads)
	traces  string // the collector's URL (I7)

	proxy, admin string
	cmd          *exec.Cmd
}

var servingRe = regexp.MustCompile(`msg="peerd serving" admin="?([0-9.:]+)"? .*proxy="?([0-9.:]+)"?`)

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func newMember(work, name, bin string, parents []*parent) (*member, error) {
	m := &member{name: name, dir: filepath.Join(work, name), parents: parents}
	if err := os.MkdirAll(m.dir, 0o755); err != nil {
		return nil, err
	}
	m.bin, m.cfgPath = filepath.Join(m.dir, "peerd"), filepath.Join(m.dir, "peerd.toml")
	m.pidFile, m.logPath = filepath.Join(m.dir, "peerd.pid"), filepath.Join(m.dir, "peerd.log")
	if err := copyFile(bin, m.bin); err != nil {
		return nil, err
	}
	var err error
	m.gossip, err = freePort()
	return m, err
}

// copyFile puts a new file at to, as a package upgrade does.
func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.WriteFile(to+".new", b, 0o755); err != nil {
		return err
	}
	return os.Rename(to+".new", to)
}

// config is the member's config at generation gen: a reload alternates
// the policy, so that every reload changes something.
func (m *member) config() string {
	policy := "round-robin"
	if m.gen%2 == 1 {
		policy = "weighted-round-robin"
	}
	join := make([]string, len(m.join))
	for i, j := range m.join {
		join[i] = strconv.Quote(j)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `[proxy]
listen = "127.0.0.1:0"
name = %q
pid_file = %q
direct = "never"
connect_timeout = "1s"
read_timeout = "5s"
pconn_timeout = "2s"
[access]
connect_ports = ["1-65535"]
[health]
connect_fail_limit = 3
probe_interval = "300ms"
probe_max_interval = "1s"
[selection]
policy = %q
[cache]
memory = "32MiB"
disk = %q
disk_size = "256MiB"
[admin]
listen = "127.0.0.1:0"
token = "secret"
[log]
level = "info"
[fleet]
bind = %q
key = %q
join = [%s]
shared_cache = true
[trace]
otlp_endpoint = %q
sample = 0.0
parent_sample = 1.0
`, m.name, m.pidFile, policy, filepath.Join(m.dir, "cache"), m.gossip, fleetKey, strings.Join(join, ", "), m.traces)
	for i, p := range m.parents {
		fmt.Fprintf(&b, "[[peer]]\nname = %q\nhost = \"127.0.0.1\"\nport = %s\nweight = %d\n", p.name, p.port(), 1+(m.gen+i)%3)
	}
	return b.String()
}

// start runs the member and waits (at most 30s) for it to serve.
func (m *member) start() error {
	if err := os.WriteFile(m.cfgPath, []byte(m.config()), 0o644); err != nil {
		return err
	}
	logf, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	os.Remove(m.pidFile)
	m.cmd = exec.Command(m.bin, "-config", m.cfgPath)
	m.cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	m.cmd.Stdout, m.cmd.Stderr = logf, logf // files: the process an upgrade starts inherits them
	if err := m.cmd.Start(); err != nil {
		return err
	}
	go m.cmd.Wait() // reaped; the pid file says who serves
	from := m.logSize()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(m.logPath)
		if len(b) > from {
			if s := servingRe.FindSubmatch(b[from:]); s != nil {
				m.admin, m.proxy = string(s[1]), string(s[2])
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("member %s not serving after 30s:\n%s", m.name, m.logTail(40))
}

func (m *member) logSize() int {
	st, err := os.Stat(m.logPath)
	if err != nil {
		return 0
	}
	return int(st.Size()) - 0
}

func (m *member) logTail(lines int) string {
	b, _ := os.ReadFile(m.logPath)
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(ls[max(0, len(ls)-lines):], "\n")
}

// pid is the serving process (from the pid file).
func (m *member) pid() int {
	b, _ := os.ReadFile(m.pidFile)
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

func (m *member) signal(s syscall.Signal) error {
	pid := m.pid()
	if pid <= 0 {
		return fmt.Errorf("member %s: no pid", m.name)
	}
	return syscall.Kill(pid, s)
}

// reload writes the next generation's config and sends SIGHUP.
func (m *member) reload() error {
	m.gen++
	if err := os.WriteFile(m.cfgPath, []byte(m.config()), 0o644); err != nil {
		return err
	}
	return m.signal(syscall.SIGHUP)
}

// upgrade drains one parent, puts a new binary at the path and sends
// SIGUSR2 at once (the member has no state file: the upgrade itself must
// hand the drain over); it waits (at most 30s) until another process
// serves, checks the drain is in force there, and enables the parent.
func (m *member) upgrade(bin string, parent string) error {
	old := m.pid()
	reason := fmt.Sprintf("chaos upgrade of %d", old)
	if err := m.adminState(parent, fmt.Sprintf(`{"admin_state":"drain","reason":%q}`, reason)); err != nil {
		return err
	}
	if err := copyFile(bin, m.bin); err != nil {
		return err
	}
	if err := m.signal(syscall.SIGUSR2); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if pid := m.pid(); pid > 0 && pid != old && syscall.Kill(old, 0) != nil {
			var st struct {
				AdminState  string `json:"admin_state"`
				AdminReason string `json:"admin_reason"`
			}
			if err := m.adminJSON("/peers/"+parent, &st); err != nil {
				return err
			}
			if st.AdminState != "drain" || st.AdminReason != reason {
				return fmt.Errorf("member %s: the drain of %s made just before SIGUSR2 was lost (admin_state %q, reason %q)", m.name, parent, st.AdminState, st.AdminReason)
			}
			return m.adminState(parent, `{"admin_state":"enabled"}`)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("member %s: no new process serving 30s after SIGUSR2:\n%s", m.name, m.logTail(20))
}

// adminState PUTs a peer's admin state.
func (m *member) adminState(peer, body string) error {
	req, _ := http.NewRequest("PUT", "http://"+m.admin+"/peers/"+peer+"/state", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer secret")
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("member %s: PUT /peers/%s/state %s: %d", m.name, peer, body, resp.StatusCode)
	}
	return nil
}

// kill ends the member at once (SIGKILL).
func (m *member) kill() {
	if pid := m.pid(); pid > 0 {
		syscall.Kill(pid, syscall.SIGKILL)
		for i := 0; i < 200 && syscall.Kill(pid, 0) == nil; i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// stop ends the member with SIGTERM, waiting at most 15s.
func (m *member) stop() {
	pid := m.pid()
	if pid <= 0 {
		return
	}
	syscall.Kill(pid, syscall.SIGTERM)
	for i := 0; i < 1500 && syscall.Kill(pid, 0) == nil; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGKILL)
}

// adminJSON GETs an admin path into v.
func (m *member) adminJSON(path string, v any) error {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + m.admin + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// fleetSize is how many members m sees alive.
func (m *member) fleetSize() int {
	var st struct {
		Members []struct{ State string } `json:"members"`
	}
	if m.adminJSON("/fleet", &st) != nil {
		return 0
	}
	n := 0
	for _, x := range st.Members {
		if x.State == "alive" {
			n++
		}
	}
	return n
}

// resources are the serving process's open descriptors, less the disk
// store's segment files (segments, counted apart: the store holds each
// segment open while it has objects in it, and their number follows
// what was stored and how often the process started, not connections),
// and its goroutines.
func (m *member) resources() (fds, segments, goroutines int) {
	segDir := filepath.Join(m.dir, "cache", "objects", "segments") + string(filepath.Separator)
	for _, t := range m.descriptorTargets() {
		if strings.HasPrefix(t, segDir) {
			segments++
		} else {
			fds++
		}
	}
	return fds, segments, m.goroutines()
}

// descriptorTargets are what the serving process's descriptors point at:
// a file's path, or "socket:[inode]", "pipe:[inode]" and the like.
func (m *member) descriptorTargets() []string {
	dir := fmt.Sprintf("/proc/%d/fd", m.pid())
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range es {
		if t, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil {
			out = append(out, t)
		}
	}
	return out
}

// descriptorKinds names what the serving process's descriptors are, for
// a report: "socket 12, /dev/null 2, ..." (sockets and pipes by kind,
// files by path).
func (m *member) descriptorKinds() string {
	n := map[string]int{}
	for _, t := range m.descriptorTargets() {
		if k, _, ok := strings.Cut(t, ":["); ok {
			t = k
		}
		n[t]++
	}
	var out []string
	for t, c := range n {
		out = append(out, fmt.Sprintf("%s %d", t, c))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// goroutines reads go_goroutines from the member's metrics.
func (m *member) goroutines() (goroutines int) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + m.admin + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	for _, l := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(l, "go_goroutines "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			goroutines = int(f)
		}
	}
	return goroutines
}
