package squidimport

// This file holds peerd import-squid: reading squid.conf (continuations,
// includes) and its peers, ports and timeouts.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/peerd/peerd/cache"
	"github.com/peerd/peerd/cmd/peerd/internal/config"
	"github.com/peerd/peerd/internal/conf"
)

// squidPeer is one cache_peer line.
type squidPeer struct {
	line                int
	host, typ           string
	port, icpPort       int
	name, login         string
	weight, failLimit   int
	maxConn             int
	connectTimeout      time.Duration
	isDefault           bool
	rr, wrr, carp, hash bool
	noQuery, proxyOnly  bool
	tls                 bool
	tlsCA, tlsName      string
	tlsCert, tlsKey     string
}

// squidImport is what was read.
type squidImport struct {
	// lossy are the notes of http_access lines that could not be said
	// as they are (see lossyAccess).
	lossy           []string
	peers           []squidPeer
	direct          string // "", never, always, prefer
	listen, name    string
	icpListen       string
	icpTimeout      time.Duration
	peerTimeout     time.Duration
	connectTimeout  time.Duration
	maxTries        int
	cacheMem        string
	maxObject       string
	maxInMemory     string // maximum_object_size_in_memory
	diskDir         string // the first cache_dir's path
	diskSize        string
	pconnTimeout    time.Duration
	proxyKeys       map[string]proxySetting // importproxy.go
	collapse        string                  // collapsed_forwarding: "true", "false" or ""
	cacheRuleSeen   bool                    // a cache (or no_cache) line was read
	cacheOff        bool                    // the first one was "cache deny all"
	headerRuleSeen  map[string]bool         // request_header_access lines read, by field
	removeFields    []string                // ... that remove a field from every request
	cacheKeys       map[string]string       // quick_abort_*: [cache] key -> TOML value
	deadPeerTimeout time.Duration           // [icp] dead_peer_timeout
	notes           []string
	says            []string     // what the config does that no line says (Squid's implicit rules)
	fileSays        string       // the parents' selection option squid.conf gives (policy())
	policyName      string       // the [selection] policy written
	noted           map[int]bool // the directives a note names
	// access_log (importlog.go): the file, and the logformat names.
	accessLogPath   string
	accessLogFormat string            // "" for squid; common, combined, or a logformat spec
	logFormats      map[string]string // logformat NAME -> its spec
	logExcluded     int               // the first "access_log none ACL" line
	icpNoLog        bool              // log_icp_queries off
	keepQuery       bool              // strip_query_terms off
	// https_port and auth_param basic.
	tlsListen, tlsCert, tlsKey string
	basicUsers, realm          string
	// Access controls (importacl.go, importroutes.go).
	acls                      map[string]*squidACL
	defined                   []string // acl names the file defines
	sawACL                    bool
	httpAccessLines           []accessLine
	icpAccessLines            []accessLine
	alwaysDirect, neverDirect []accessLine
	peerAccessLines           []peerAccessLine
	rules, routes             []importRule
	denyTo                    []string
	// [access] ports from Squid's Safe_ports and SSL_ports lines, and
	// [cache] heuristics from refresh_pattern's catch-all.
	safePorts, connectPorts []string
	heuristicPercent        int
	heuristicMax            time.Duration
	heuristicSet            bool
	refresh                 []cache.RefreshPattern
	// lines are the directives read, in order (numbered across the
	// files included); spans map the numbers to files (importread.go).
	lines []squidLine
	spans []span
}

// squidLine is one directive's (last) line number and name.
type squidLine struct {
	n         int
	directive string
	arg       string // the first argument (an acl's name)
}

// note lists what directive n (0: the file as a whole) could not carry
// over, naming its file and line.
func (s *squidImport) note(n int, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if n > 0 {
		msg = s.where(n) + ": " + msg
		s.noted[n] = true
	}
	s.notes = append(s.notes, redactSecrets(msg))
}

// say records what the imported config does that no squid.conf line
// says (Squid's implicit rules): a stderr line and a comment.
func (s *squidImport) say(format string, args ...any) {
	s.says = append(s.says, redactSecrets(fmt.Sprintf(format, args...)))
}

// Command runs "peerd import-squid FILE".
func Command(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("peerd import-squid", flag.ContinueOnError)
	fs.SetOutput(stderr)
	lossy := fs.Bool("lossy", false, "write the config even when an http_access line has to be widened or dropped (each is a comment and a stderr line)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: peerd import-squid [-lossy] FILE\n\nPrints the peerd TOML equivalent of a squid.conf; what has no equivalent is\nlisted on stderr and as comments, and access lines it cannot say fail closed.\nAn http_access line that would have to be widened or dropped stops the import\n(exit 1, naming the line) unless -lossy is given.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitConfig
	}
	args = fs.Args()
	if len(args) != 1 {
		fs.Usage()
		return exitConfig
	}
	f, err := os.Open(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "peerd: import-squid: %v\n", err)
		return exitConfig
	}
	defer f.Close()
	s, out, err := convertFrom(osFiles{}, args[0], f)
	if err != nil {
		fmt.Fprintf(stderr, "peerd: import-squid: %s: %v\n", args[0], err)
		return exitConfig
	}
	if len(s.lossy) > 0 && !*lossy {
		for _, n := range s.lossy {
			fmt.Fprintf(stderr, "peerd: import-squid: %s: %s\n", args[0], conf.Printable(n))
		}
		fmt.Fprintf(stderr, "peerd: import-squid: %d http_access line(s) above have an ACL peerd cannot say: the config would refuse (or admit) other requests than Squid does; nothing written (-lossy writes it anyway, each line a comment)\n", len(s.lossy))
		return exitConfig
	}
	for _, n := range s.says {
		fmt.Fprintf(stderr, "peerd: import-squid: note: %s\n", conf.Printable(n))
	}
	for _, n := range s.notes {
		fmt.Fprintf(stderr, "peerd: import-squid: not carried over: %s\n", conf.Printable(n))
	}
	for _, w := range importWarnings(out) {
		fmt.Fprintf(stderr, "peerd: import-squid: warning: %s\n", w)
	}
	fmt.Fprintf(stderr, "peerd: import-squid: %s: %s\n", args[0], s.summary())
	io.WriteString(stdout, out)
	return exitOK
}

// importWarnings are -check's warnings about what an import wrote that an
// operator must look at before using it (an open proxy).
func importWarnings(out string) []string {
	cfg, ps := config.ParseFiles([]byte(out), false)
	if len(ps) > 0 {
		return nil
	}
	var w []string
	for _, s := range cfg.Warnings() {
		if strings.HasPrefix(s, "open proxy") {
			w = append(w, s)
		}
	}
	return w
}

// httpsPort reads "https_port [addr:]port tls-cert=F tls-key=F ...".
func (s *squidImport) httpsPort(n int, w []string) error {
	if len(w) == 0 {
		return fmt.Errorf("https_port needs a port")
	}
	addr := w[0]
	if _, err := strconv.Atoi(addr); err == nil {
		addr = "0.0.0.0:" + addr
	}
	if ap, err := netip.ParseAddrPort(addr); err != nil || ap.Port() == 0 {
		return fmt.Errorf("https_port %q: peerd listens on an IP address and a port", w[0])
	}
	var cert, key string
	for _, o := range w[1:] {
		k, v, _ := strings.Cut(o, "=")
		switch k {
		case "tls-cert", "cert":
			cert = v
		case "tls-key", "key":
			key = v
		default:
			s.note(n, "https_port option %s", o)
		}
	}
	if key == "" {
		key = cert // Squid reads the key from the certificate file when no key is named
	}
	if cert == "" || s.tlsListen != "" {
		s.note(n, "https_port %s: peerd has one TLS listener, with tls-cert= (and tls-key=)", w[0])
		return nil
	}
	s.tlsListen, s.tlsCert, s.tlsKey = addr, cert, key
	return nil
}

// authParam reads "auth_param basic program .../basic_ncsa_auth FILE" and
// "auth_param basic realm TEXT"; every other scheme or helper is listed.
func (s *squidImport) authParam(n int, w []string) error {
	if len(w) < 2 || w[0] != "basic" {
		s.note(n, "auth_param %s: peerd has Basic authentication from an htpasswd file only", strings.Join(w, " "))
		return nil
	}
	switch w[1] {
	case "program":
		if len(w) == 4 && strings.HasSuffix(w[2], "basic_ncsa_auth") {
			s.basicUsers = w[3]
			return nil
		}
		s.note(n, "auth_param basic program %s: peerd reads an htpasswd file itself (basic_ncsa_auth FILE)", strings.Join(w[2:], " "))
	case "realm":
		s.realm = strings.Trim(strings.Join(w[2:], " "), `"`)
		if strings.ContainsAny(s.realm, "\"\\") {
			s.realm = ""
		}
	case "children", "credentialsttl", "casesensitive", "utf8", "keep_alive":
		// Helper tuning: peerd checks passwords in process (and caches
		// verified ones for a minute).
	default:
		s.note(n, "auth_param basic %s", strings.Join(w[1:], " "))
	}
	return nil
}

// maxSquidLine bounds one squid.conf line with its continuations.
const maxSquidLine = 1 << 20

// importSquid converts a squid.conf. A cache_peer peerd cannot use at all
// (an originserver, a multicast group) is an error: a config without it
// would route differently from Squid.
func importSquid(r io.Reader) (string, []string, error) {
	s, out, err := convertSquid(r)
	if err != nil {
		return "", nil, err
	}
	return out, s.notes, nil
}

// convertSquid is importSquid, keeping what was read (for the counts of
// lines carried over); includes are read relative to the working
// directory.
func convertSquid(r io.Reader) (*squidImport, string, error) {
	return convertFrom(osFiles{}, "squid.conf", r)
}

// convertFrom converts the squid.conf name, read from r, with the files
// it includes read from src.
func convertFrom(src source, name string, r io.Reader) (*squidImport, string, error) {
	s := &squidImport{acls: builtinACLs(), noted: map[int]bool{}}
	rd := &squidReader{s: s, src: src}
	if err := rd.file(name, r); err != nil {
		return nil, "", err
	}
	if err := s.uniqueNames(); err != nil {
		return nil, "", err
	}
	s.fitMaxObject()
	s.refreshDefaults()
	s.httpAccess()
	if len(s.peerAccessLines) > 0 || len(s.alwaysDirect) > 0 || len(s.neverDirect) > 0 {
		if !s.regionRoutes() {
			s.note(0, "the routing lines name more than %d ACLs: translated line by line, leaning to the safe side", maxRegionACLs)
			s.directRoutes()
			s.peerAccess()
		}
	}
	out := s.render()
	// What is printed must pass -check; a squid.conf whose values peerd
	// refuses is reported here with peerd's own words.
	if _, ps := config.ParseFiles([]byte(out), false); len(ps) > 0 {
		return nil, "", fmt.Errorf("the converted config would not pass -check: %v", ps)
	}
	return s, out, nil
}

func (s *squidImport) directive(n int, w []string) error {
	arg := func(i int) string {
		if i < len(w) {
			return w[i]
		}
		return ""
	}
	if ok, err := s.proxyDirective(n, w); ok {
		return err
	}
	switch w[0] {
	case "cache_peer":
		return s.cachePeer(n, w[1:])
	case "never_direct", "always_direct":
		if l := s.accessList(n, w[0], w[1:]); l != nil {
			if w[0] == "never_direct" {
				s.neverDirect = append(s.neverDirect, *l)
			} else {
				s.alwaysDirect = append(s.alwaysDirect, *l)
			}
		}
	case "acl":
		s.sawACL = true
		s.acl(n, w[1:])
	case "http_access":
		s.sawACL = true
		if l := s.accessList(n, w[0], w[1:]); l != nil {
			s.httpAccessLines = append(s.httpAccessLines, *l)
		}
	case "icp_access":
		if l := s.accessList(n, w[0], w[1:]); l != nil {
			s.icpAccessLines = append(s.icpAccessLines, *l)
		}
	case "cache_peer_access":
		s.cachePeerAccess(n, w[1:])
	case "cache_peer_domain":
		s.cachePeerDomain(n, w[1:])
	case "refresh_pattern":
		s.refreshPattern(n, w[1:])
	case "prefer_direct":
		if arg(1) == "on" && s.direct == "" {
			s.direct = "prefer"
		}
	case "http_port":
		if len(w) > 2 {
			s.note(n, "http_port options %s", strings.Join(w[2:], " "))
		}
		addr := arg(1)
		if addr == "" {
			return fmt.Errorf("http_port needs a port")
		}
		if _, err := strconv.Atoi(addr); err == nil {
			addr = "0.0.0.0:" + addr // Squid listens on every address
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("http_port %q: %v", arg(1), err)
		}
		if host == "" {
			host = "0.0.0.0"
		}
		addr = net.JoinHostPort(host, port)
		if ap, err := netip.ParseAddrPort(addr); err != nil || ap.Port() == 0 {
			return fmt.Errorf("http_port %q: peerd listens on an IP address and a port (e.g. 3128 or 10.0.0.1:3128)", arg(1))
		}
		if s.listen != "" {
			s.note(n, "a second http_port (%s): peerd listens on one address", arg(1))
			return nil
		}
		s.listen = addr
	case "https_port":
		return s.httpsPort(n, w[1:])
	case "auth_param":
		return s.authParam(n, w[1:])
	case "visible_hostname":
		s.name = arg(1)
	case "icp_port", "udp_port":
		port, err := strconv.Atoi(arg(1))
		if err != nil || port < 0 || port > 65535 {
			return fmt.Errorf("%s %q is not a port", w[0], arg(1))
		}
		if port != 0 {
			// Squid answers on every address; so does this.
			s.icpListen = net.JoinHostPort("0.0.0.0", strconv.Itoa(port))
		}
	case "icp_query_timeout":
		ms, err := strconv.Atoi(arg(1))
		if err != nil || ms < 0 {
			return fmt.Errorf("icp_query_timeout %q is not milliseconds", arg(1))
		}
		s.icpTimeout = time.Duration(ms) * time.Millisecond // 0: auto, as in Squid
	case "peer_connect_timeout", "connect_timeout", "pconn_timeout":
		d, err := squidDuration(w[1:])
		if err != nil {
			return fmt.Errorf("%s: %v", w[0], err)
		}
		switch w[0] {
		case "peer_connect_timeout":
			s.peerTimeout = d
		case "connect_timeout":
			s.connectTimeout = d
		default:
			s.pconnTimeout = d
		}
	case "forward_max_tries":
		v, err := strconv.Atoi(arg(1))
		if err != nil || v < 1 {
			return fmt.Errorf("forward_max_tries %q is not a positive number", arg(1))
		}
		s.maxTries = v
	case "cache_mem", "maximum_object_size", "maximum_object_size_in_memory":
		size, err := squidSize(w[1:])
		if err != nil {
			return fmt.Errorf("%s: %v", w[0], err)
		}
		switch w[0] {
		case "cache_mem":
			s.cacheMem = size
		case "maximum_object_size":
			s.maxObject = size
		default:
			s.maxInMemory = size
		}
	case "cache_dir":
		return s.cacheDir(n, w[1:])
	case "access_log", "logformat", "log_icp_queries", "strip_query_terms":
		s.logDirective(n, w)
	default:
		s.note(n, "%s", strings.Join(w, " "))
	}
	return nil
}

// Exit codes of "peerd import-squid": the contract's for the command line.
const (
	exitOK     = 0
	exitConfig = 1
)
