package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/peerd/peerd/access"
	"github.com/peerd/peerd/admin"
	"github.com/peerd/peerd/forwarding"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
	"github.com/sirupsen/logrus"
)

// fileConfig is the TOML file: each section owned by its package.
type fileConfig struct {
	Proxy     forwarding.Config `toml:"proxy"`
	Access    access.Config     `toml:"access"`
	Health    peers.Config      `toml:"health"`
	Selection selection.Config  `toml:"selection"`
	Admin     admin.Config      `toml:"admin"`
	Log       logConfig         `toml:"log"`
	Peers     []peers.Spec      `toml:"peer"`
}

// logConfig is the [log] section.
type logConfig struct {
	// Level is a logrus level: debug, info, warn, error.
	Level string `toml:"level"`
	// Format is text or json.
	Format string `toml:"format"`
	// AccessLog is a file path for the Squid-format access log; "" is off.
	AccessLog string `toml:"access_log"`
}

func (c logConfig) Validate() error {
	var errs []error
	if _, err := logrus.ParseLevel(c.Level); err != nil {
		errs = append(errs, fmt.Errorf("log.level: %q is not a level (want debug, info, warn or error)", c.Level))
	}
	if c.Format != "text" && c.Format != "json" {
		errs = append(errs, fmt.Errorf("log.format: %q (want text or json)", c.Format))
	}
	return errors.Join(errs...)
}

func defaultConfig() fileConfig {
	return fileConfig{
		Proxy:     forwarding.DefaultConfig(),
		Access:    access.DefaultConfig(),
		Health:    peers.DefaultConfig(),
		Selection: selection.DefaultConfig(),
		Admin:     admin.DefaultConfig(),
		Log:       logConfig{Level: "info", Format: "text"},
	}
}

// problem is one config error, with the line it is on when known.
type problem struct {
	line int
	msg  string
}

func (p problem) String() string {
	if p.line > 0 {
		return fmt.Sprintf("line %d: %s", p.line, p.msg)
	}
	return p.msg
}

// problems is every error found in a config file.
type problems []problem

func (ps problems) Error() string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, "; ")
}

// parseConfig decodes and validates src, returning every problem found.
func parseConfig(src []byte) (*fileConfig, problems) {
	cfg := defaultConfig()
	md, err := toml.NewDecoder(bytes.NewReader(src)).Decode(&cfg)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			msg := pe.Message
			if pe.LastKey != "" {
				msg = pe.LastKey + ": " + msg
			}
			return nil, problems{{line: pe.Position.Line, msg: msg}}
		}
		return nil, problems{{msg: strings.TrimPrefix(err.Error(), "toml: ")}}
	}
	var ps problems
	for _, k := range md.Undecoded() {
		ps = append(ps, problem{line: locateKey(src, k), msg: fmt.Sprintf("%s: unknown key", k)})
	}
	explicit := explicitPeerKeys(md)
	for i := range cfg.Peers {
		raw := cfg.Peers[i]
		s := raw.WithDefaults()
		ex := explicit[i]
		// An explicit zero is a mistake, not a request for the default.
		if ex["weight"] {
			s.Weight = raw.Weight
		}
		if ex["port"] {
			s.Port = raw.Port
			if raw.Name == "" && raw.Host != "" {
				s.Name = s.Addr()
			}
		}
		prefix := fmt.Sprintf("peer[%d] %q", i, s.Name)
		if ex["connect_fail_limit"] && raw.ConnectFailLimit < 1 {
			ps = append(ps, problem{line: locate(src, "peer", i, "connect_fail_limit"), msg: fmt.Sprintf("%s: connect_fail_limit: must be at least 1, got %d", prefix, raw.ConnectFailLimit)})
		}
		if ex["connect_timeout"] && raw.ConnectTimeout <= 0 {
			ps = append(ps, problem{line: locate(src, "peer", i, "connect_timeout"), msg: fmt.Sprintf("%s: connect_timeout: must be positive, got %s", prefix, raw.ConnectTimeout)})
		}
		cfg.Peers[i] = s
	}
	for _, err := range cfg.validate() {
		ps = append(ps, problem{line: locateMessage(src, err.Error()), msg: err.Error()})
	}
	if len(ps) > 0 {
		return nil, ps
	}
	return &cfg, nil
}

// validate runs every section's own validation and the cross-section checks.
func (c *fileConfig) validate() []error {
	var errs []error
	var add func(err error)
	add = func(err error) {
		if err == nil {
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				add(e)
			}
			return
		}
		errs = append(errs, err)
	}
	add(c.Proxy.Validate())
	add(c.Access.Validate())
	if _, err := selection.ParseDirect(c.Proxy.Direct); err != nil {
		add(fmt.Errorf("proxy.direct: %w", err))
	}
	add(c.Health.Validate())
	add(c.Selection.Validate())
	add(c.Admin.Validate())
	add(c.Log.Validate())
	add(peers.ValidateSpecs(c.Peers))
	if c.Proxy.Listen == c.Admin.Listen && !strings.HasSuffix(c.Proxy.Listen, ":0") {
		add(fmt.Errorf("admin.listen: %q is also proxy.listen", c.Admin.Listen))
	}
	return errs
}

// explicitPeerKeys lists, per [[peer]] table, the keys the file sets.
func explicitPeerKeys(md toml.MetaData) map[int]map[string]bool {
	out := map[int]map[string]bool{}
	idx := -1
	for _, k := range md.Keys() {
		switch {
		case len(k) == 1 && k[0] == "peer":
			idx++
			out[idx] = map[string]bool{}
		case len(k) == 2 && k[0] == "peer" && idx >= 0:
			out[idx][k[1]] = true
		}
	}
	return out
}

var tableHeader = regexp.MustCompile(`^\s*\[(\[)?\s*([A-Za-z0-9_.-]+)\s*\]`)

// locate finds the line of key in table (the idx-th one for arrays of
// tables; -1 for plain tables). 0 means not found.
func locate(src []byte, table string, idx int, key string) int {
	sc := bufio.NewScanner(bytes.NewReader(src))
	line, cur, n := 0, "", -1
	for sc.Scan() {
		line++
		text := sc.Text()
		if m := tableHeader.FindStringSubmatch(text); m != nil {
			cur = m[2]
			if m[1] != "" && cur == table {
				n++
			}
			if key == "" && cur == table && (idx < 0 || n == idx) {
				return line
			}
			continue
		}
		if cur != table || (idx >= 0 && n != idx) {
			continue
		}
		t := strings.TrimSpace(text)
		if rest, ok := strings.CutPrefix(t, key); ok && strings.HasPrefix(strings.TrimSpace(rest), "=") {
			return line
		}
	}
	return 0
}

// locateKey finds an undecoded key's line.
func locateKey(src []byte, k toml.Key) int {
	if len(k) == 1 {
		if l := locate(src, "", -1, k[0]); l > 0 {
			return l
		}
		return locate(src, k[0], -1, "")
	}
	// For [[peer]] the index of the table holding the key is not known
	// here; index -1 finds the first [[peer]] table that holds it.
	return locate(src, strings.Join(k[:len(k)-1], "."), -1, k[len(k)-1])
}

var (
	sectionMsg = regexp.MustCompile(`^(proxy|access|health|selection|admin|log)\.([a-z_]+):`)
	peerMsg    = regexp.MustCompile(`^peer\[(\d+)\] "[^"]*": ([a-z_]+):`)
)

// locateMessage finds the line a validation message is about.
func locateMessage(src []byte, msg string) int {
	if m := sectionMsg.FindStringSubmatch(msg); m != nil {
		return locate(src, m[1], -1, m[2])
	}
	if m := peerMsg.FindStringSubmatch(msg); m != nil {
		i, _ := strconv.Atoi(m[1])
		if l := locate(src, "peer", i, m[2]); l > 0 {
			return l
		}
		return locate(src, "peer", i, "")
	}
	return 0
}

// peerOptions builds the registry options from the config.
func (c *fileConfig) peerOptions(log logrus.FieldLogger) peers.Options {
	return peers.Options{Health: c.Health, ConnectTimeout: c.Proxy.ConnectTimeout, Log: log}
}

// plannerOptions builds the selection options from the config.
func (c *fileConfig) plannerOptions() selection.Options {
	pol, _ := selection.ParsePolicy(c.Selection.Policy)
	dir, _ := selection.ParseDirect(c.Proxy.Direct)
	return selection.Options{Policy: pol, Direct: dir, MaxTries: c.Proxy.ForwardMaxTries}
}

// policy compiles the destination policy. peerd's own listen and admin
// addresses are refused as destinations (deny_to_local); a wildcard listen
// address stands for every address of the host's interfaces.
func (c *fileConfig) policy() (*access.Policy, error) {
	var own []netip.AddrPort
	var local []netip.Addr
	for _, l := range []string{c.Proxy.Listen, c.Admin.Listen} {
		ap, err := netip.ParseAddrPort(l)
		if err != nil {
			continue
		}
		if !ap.Addr().IsUnspecified() {
			own = append(own, ap)
			continue
		}
		if local == nil {
			local = interfaceAddrs()
		}
		for _, a := range local {
			own = append(own, netip.AddrPortFrom(a, ap.Port()))
		}
	}
	return access.Compile(c.Access, own)
}

func interfaceAddrs() []netip.Addr {
	addrs, _ := net.InterfaceAddrs()
	out := []netip.Addr{}
	for _, a := range addrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, pfx.Addr().Unmap())
		}
	}
	return out
}

// verdictWait is how long start-up waits for first probe verdicts: the
// longest probe timeout of any peer.
func verdictWait(reg *peers.Registry) time.Duration {
	var d time.Duration
	for _, p := range reg.Peers() {
		d = max(d, p.ProbeTimeout())
	}
	return d
}
