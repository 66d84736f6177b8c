package main

// This file holds the benchmark machinery: the machine description, the
// parents, and starting each child under test (peerd, Squid, ATS, the floors).

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/peerd/peerd/internal/testbed"
)

func machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				cpu = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	return fmt.Sprintf("%d cores (%s), %s/%s, %s", runtime.NumCPU(), cpu, runtime.GOOS, runtime.GOARCH, runtime.Version())
}

func atsVersion(bin string) string {
	if bin == "" {
		return "not installed"
	}
	out, _ := exec.Command(bin, "-V").CombinedOutput()
	if m := regexp.MustCompile(`Traffic Server (\S+)`).FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return "unknown"
}

func squidVersion(bin string) string {
	if bin == "" {
		return "not installed"
	}
	out, _ := exec.Command(bin, "-v").Output()
	if m := regexp.MustCompile(`Version (\S+)`).FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return "unknown"
}

// newParent starts an in-process parent answering -size bytes (cache off).
func newParent(name string) *testbed.Parent {
	p, err := testbed.NewParent(name, *size)
	must(err)
	p.SetHeader("Cache-Control", "no-store")
	return p
}

func portOf(addr string) string { _, port, _ := net.SplitHostPort(addr); return port }

// hop is a next hop of a child under test: a loopback parent's name and
// port.
type hop struct{ name, port string }

func hopOf(p *testbed.Parent) hop { return hop{name: p.Name, port: p.Port()} }

func hopsOf(ps []*testbed.Parent) []hop {
	out := make([]hop, len(ps))
	for i, p := range ps {
		out[i] = hopOf(p)
	}
	return out
}

// child is a running child proxy (peerd, squid or ats).
type child struct {
	kind  string
	addr  string
	admin string
	dir   string
	pid   int
	stop  func()
	squid *testbed.Squid // a Squid child, for a restart
}

func freePort() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	defer ln.Close()
	_, p, _ := net.SplitHostPort(ln.Addr().String())
	return p
}

func waitListening(addr string) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	must(fmt.Errorf("%s not listening after 30s", addr))
}

// startPeerd runs peerd with the given parents.
func startPeerd(work, bin string, parents []hop, extra string) *child {
	return startPeerdWith(work, bin, parents, extra, "")
}

// startPeerdWith is startPeerd with keys added to every [[peer]].
func startPeerdWith(work, bin string, parents []hop, extra, peerExtra string) *child {
	return startPeerdThreads(work, bin, parents, extra, peerExtra, *threads)
}

// startPeerdThreads is startPeerdWith with GOMAXPROCS=threads in peerd's
// environment (0: none, so peerd sizes its threads to the load).
func startPeerdThreads(work, bin string, parents []hop, extra, peerExtra string, threads int) *child {
	dir, _ := os.MkdirTemp(work, "peerd-")
	var b strings.Builder
	fmt.Fprintf(&b, "[proxy]\nlisten = \"127.0.0.1:0\"\nconnect_timeout = \"1s\"\n%s\n[admin]\nlisten = \"127.0.0.1:0\"\n[log]\nlevel = \"info\"\n", extra)
	fmt.Fprintf(&b, "[health]\nprobe_interval = \"1s\"\nprobe_max_interval = \"5s\"\n[selection]\npolicy = \"round-robin\"\n")
	// The memory run tunnels DIRECT to a loopback sink, which the default
	// destination policy refuses.
	b.WriteString("[access]\ndeny_to_local = false\nconnect_ports = [\"1-65535\"]\n")
	for _, p := range parents {
		fmt.Fprintf(&b, "[[peer]]\nname = %q\nhost = \"127.0.0.1\"\nport = %s\n%s", p.name, p.port, peerExtra)
	}
	var env []string
	if threads > 0 {
		env = append(env, fmt.Sprintf("GOMAXPROCS=%d", threads))
	}
	if *cpuProfDir != "" {
		env = append(env, "PEERD_CPUPROFILE="+filepath.Join(*cpuProfDir, filepath.Base(dir)+".pprof"))
	}
	pd, err := testbed.StartPeerd(bin, dir, b.String(), env...)
	must(err)
	return &child{kind: "peerd", addr: pd.Proxy, admin: pd.Admin, dir: dir, pid: pd.Cmd.Process.Pid, stop: pd.Stop}
}

// startFloor runs bench/floor in the given loop mode in front of parent.
func startFloor(bin, mode, parent string) *child {
	cmd := exec.Command(bin, "-loop", mode, parent)
	out, err := cmd.StdoutPipe()
	must(err)
	cmd.Stderr = os.Stderr
	must(cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	must(err)
	return &child{kind: "floor", addr: strings.TrimSpace(line), pid: cmd.Process.Pid, stop: func() {
		cmd.Process.Kill()
		cmd.Wait()
	}}
}

// startSquid runs Squid as the child with the given parents (round-robin,
// no caching), or direct when parents is empty.
func startSquid(work, bin string, parents []hop) *child {
	return startSquidWith(work, bin, parents, "", "")
}

// startSquidWith is startSquid with options added to every cache_peer
// line and lines added to squid.conf.
func startSquidWith(work, bin string, parents []hop, peerOpts, extra string) *child {
	dir, _ := os.MkdirTemp(work, "squid-")
	var b strings.Builder
	b.WriteString("cache deny all\nconnect_timeout 1 seconds\npeer_connect_timeout 1 seconds\n")
	if len(parents) == 0 {
		b.WriteString("always_direct allow all\n")
	} else {
		b.WriteString("never_direct allow all\n")
		for _, p := range parents {
			fmt.Fprintf(&b, "cache_peer 127.0.0.1 parent %s 0 no-query no-digest round-robin name=%s%s\n", p.port, p.name, peerOpts)
		}
	}
	b.WriteString(extra)
	sq, err := testbed.StartSquid(bin, dir, testbed.SquidOptions{Name: "squid-" + filepath.Base(dir), Extra: b.String(), NoAccessLog: true})
	must(err)
	return &child{kind: "squid", addr: sq.Addr, dir: dir, pid: sq.Pid(), stop: sq.Kill}
}

// atsThreads is ATS's thread setting: its own default (one exec thread
// per core) unless -threads says otherwise.
func atsThreads() string {
	if *threads <= 0 {
		return "CONFIG proxy.config.exec_thread.autoconfig INT 1\nCONFIG proxy.config.exec_thread.autoconfig.scale FLOAT 1.0\n"
	}
	return fmt.Sprintf("CONFIG proxy.config.exec_thread.autoconfig INT 0\nCONFIG proxy.config.exec_thread.limit INT %d\n", *threads)
}

// startATS runs Apache Traffic Server as the child: a forward proxy with
// its cache off, every request to the given parents (round-robin; none:
// DIRECT, with CONNECT to any port), in a private runroot so it touches
// nothing of the system's.
func startATS(work, bin string, parents []hop) *child {
	dir, _ := os.MkdirTemp(work, "ats-")
	for _, d := range []string{"etc", "run", "log", "cache"} {
		must(os.MkdirAll(filepath.Join(dir, d), 0o777))
	}
	port := freePort()
	files := map[string]string{
		"runroot.yaml": fmt.Sprintf("prefix: /usr\nexec_prefix: /usr\nbindir: /usr/bin\nsbindir: /usr/sbin\nsysconfdir: %[1]s/etc\n"+
			"datadir: %[1]s/cache\nincludedir: /usr/include\nlibdir: /usr/lib/trafficserver\nlibexecdir: /usr/lib/trafficserver/modules\n"+
			"localstatedir: %[1]s/run\nruntimedir: %[1]s/run\nlogdir: %[1]s/log\ncachedir: %[1]s/cache\n", dir),
		"etc/records.config": "CONFIG proxy.config.http.server_ports STRING " + port + "\n" + `CONFIG proxy.config.admin.user_id STRING #-1
CONFIG proxy.config.http.cache.http INT 0
CONFIG proxy.config.url_remap.remap_required INT 0
CONFIG proxy.config.reverse_proxy.enabled INT 0
CONFIG proxy.config.http.no_dns_just_forward_to_parent INT 1
CONFIG proxy.config.http.uncacheable_requests_bypass_parent INT 0
CONFIG proxy.config.http.parent_proxy.self_detect INT 0
CONFIG proxy.config.http.connect_attempts_timeout INT 1
` + atsThreads() + `CONFIG proxy.config.accept_threads INT 0
CONFIG proxy.config.log.logging_enabled INT 0
CONFIG proxy.config.diags.debug.enabled INT 0
CONFIG proxy.config.cache.ram_cache.size INT 8388608
`,
		"etc/storage.config": dir + "/cache 64M\n",
		"etc/remap.config":   "\n",
		"etc/ip_allow.yaml":  "ip_allow:\n  - apply: in\n    ip_addrs: 0/0\n    action: allow\n    methods: ALL\n  - apply: in\n    ip_addrs: ::/0\n    action: allow\n    methods: ALL\n",
		"etc/plugin.config":  "\n",
		"etc/logging.yaml":   "logging: {}\n",
	}
	var ps []string
	for _, p := range parents {
		ps = append(ps, "127.0.0.1:"+p.port)
	}
	files["etc/parent.config"] = fmt.Sprintf("dest_domain=. parent=%q round_robin=strict go_direct=false\n", strings.Join(ps, ";"))
	if len(parents) == 0 {
		// DIRECT (the tunnel run): no parent, and CONNECT to any port.
		files["etc/parent.config"] = "\n"
		files["etc/records.config"] = strings.Replace(files["etc/records.config"], "CONFIG proxy.config.http.no_dns_just_forward_to_parent INT 1\n",
			"CONFIG proxy.config.http.no_dns_just_forward_to_parent INT 0\nCONFIG proxy.config.http.connect_ports STRING 1-65535\n", 1)
	}
	for _, f := range []string{"hosting.config", "volume.config", "cache.config", "sni.yaml", "socks.config", "splitdns.config", "ssl_multicert.config", "strategies.yaml"} {
		files["etc/"+f] = ""
	}
	for name, body := range files {
		must(os.WriteFile(filepath.Join(dir, name), []byte(body), 0o666))
	}
	logf, _ := os.Create(filepath.Join(dir, "stderr.log"))
	cmd := exec.Command(bin, "--run-root="+filepath.Join(dir, "runroot.yaml"))
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	must(cmd.Start())
	c := &child{kind: "ats", addr: "127.0.0.1:" + port, dir: dir, pid: cmd.Process.Pid, stop: func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
	}}
	waitListening(c.addr)
	return c
}
