package main

// This file holds the TOML file: the sections assembled from each package's
// Config, loading, and validation with line numbers.

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/peerd/peerd/auth"

	"github.com/BurntSushi/toml"
	"github.com/peerd/peerd/access"
	"github.com/peerd/peerd/admin"
	"github.com/peerd/peerd/cache"
	"github.com/peerd/peerd/fleet"
	"github.com/peerd/peerd/forwarding"
	"github.com/peerd/peerd/icp"
	"github.com/peerd/peerd/internal/conf"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
	"github.com/sirupsen/logrus"
)

// fileConfig is the TOML file: each section owned by its package.
type fileConfig struct {
	Proxy     forwarding.Config     `toml:"proxy"`
	Access    access.Config         `toml:"access"`
	Health    peers.Config          `toml:"health"`
	Selection selection.Config      `toml:"selection"`
	Admin     admin.Config          `toml:"admin"`
	Cache     cache.Config          `toml:"cache"`
	Fleet     fleet.Config          `toml:"fleet"`
	ICP       icp.Config            `toml:"icp"`
	Auth      auth.Config           `toml:"auth"`
	Log       logConfig             `toml:"log"`
	Peers     []peers.Spec          `toml:"peer"`
	Routes    []selection.RouteSpec `toml:"route"`
	Rules     []forwarding.RuleSpec `toml:"rule"`
}

// logConfig is the [log] section.
type logConfig struct {
	// Level is a logrus level: debug, info, warn, error.
	Level logLevel `toml:"level"`
	// Format is text or json.
	Format logFormat `toml:"format"`
	// AccessLog is a file path for the Squid-format access log; "" is off.
	AccessLog string `toml:"access_log"`
	// StripQueryTerms logs URLs without their query ("http://h/p?"), as
	// Squid does by default (strip_query_terms): a query often carries
	// tokens that must not sit in a log. Default true.
	StripQueryTerms bool `toml:"strip_query_terms"`
	// AccessLogFormat is "squid" (Squid's native line), "common",
	// "combined", or a Squid logformat string of the codes peerd knows.
	AccessLogFormat string `toml:"access_log_format"`
}

// format is the compiled access_log_format (validated).
func (c logConfig) format() *forwarding.LogFormat {
	f, _ := forwarding.CompileLogFormat(c.AccessLogFormat)
	return f
}

// logLevel is a logrus level word.
type logLevel logrus.Level

func (l *logLevel) UnmarshalText(b []byte) error {
	v, err := logrus.ParseLevel(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a level (want debug, info, warn or error)", b)
	}
	*l = logLevel(v)
	return nil
}

func (l logLevel) MarshalText() ([]byte, error) { return logrus.Level(l).MarshalText() }

// logFormat is "text" or "json".
type logFormat string

func (f *logFormat) UnmarshalText(b []byte) error {
	if s := string(b); s == "text" || s == "json" {
		*f = logFormat(s)
		return nil
	}
	return fmt.Errorf("%q is not a log format (want text or json)", b)
}

func (c logConfig) Validate() error {
	if _, err := forwarding.CompileLogFormat(c.AccessLogFormat); err != nil {
		return conf.Errorf("log", "access_log_format", "%v", err)
	}
	return nil
}

// defaultConfig is the embedded default: every section's own defaults.
func defaultConfig() fileConfig {
	return fileConfig{
		Proxy:     forwarding.DefaultConfig(),
		Access:    access.DefaultConfig(),
		Health:    peers.DefaultConfig(),
		Selection: selection.DefaultConfig(),
		Admin:     admin.DefaultConfig(),
		Cache:     cache.DefaultConfig(),
		Fleet:     fleet.DefaultConfig(),
		ICP:       icp.DefaultConfig(),
		Auth:      auth.DefaultConfig(),
		Log:       logConfig{Level: logLevel(logrus.InfoLevel), Format: "text", StripQueryTerms: true, AccessLogFormat: "squid"},
	}
}

// problem is one config error, with the line it is on when known.
type problem struct {
	line int
	msg  string
	// key names what the problem is about ("" only for a file that is not
	// TOML at all); every other problem names a key.
	key string
}

func (p problem) String() string {
	if p.line > 0 {
		return fmt.Sprintf("line %d: %s", p.line, p.msg)
	}
	return p.msg
}

// problems is every error found in a config file, in file order.
type problems []problem

func (ps problems) Error() string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, "; ")
}

// sort puts problems in file order (those without a line last), then by
// message, so that -check prints the same thing on every run.
func (ps problems) sort() {
	slices.SortStableFunc(ps, func(a, b problem) int {
		la, lb := a.line, b.line
		if la == 0 {
			la = 1 << 30
		}
		if lb == 0 {
			lb = 1 << 30
		}
		return cmp.Or(cmp.Compare(la, lb), cmp.Compare(a.msg, b.msg))
	})
}

// decoder decodes one file key by key, so that a bad value is reported
// with its position and decoding goes on past it.
type decoder struct {
	md  toml.MetaData
	src []byte
	ps  problems
	// at is where each decoded key is: "health.connect_fail_limit" and,
	// for peers, "peer[2].port".
	at map[string]int
	// peerKeys says which keys each [[peer]] table sets.
	peerKeys []map[string]bool
	// peerErrs are decode errors of [[peer]] keys, reported once the
	// peer's name (perhaps defaulted from host:port) is known.
	peerErrs []*conf.Error
}

// parseConfig decodes and validates src, returning every problem found.
func parseConfig(src []byte) (*fileConfig, problems) { return parseConfigFiles(src, true) }

// parseConfigFiles is parseConfig; files says whether the files the config
// names (certificates, the htpasswd file) are read and checked too
// (import-squid checks a config meant for another machine: words only).
func parseConfigFiles(src []byte, files bool) (*fileConfig, problems) {
	cfg := defaultConfig()
	d := &decoder{src: src, at: map[string]int{}}
	var top map[string]toml.Primitive
	md, err := toml.NewDecoder(bytes.NewReader(src)).Decode(&top)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			key, msg := pe.LastKey, pe.Message
			if key != "" {
				msg = key + ": " + msg
			}
			return nil, problems{{line: pe.Position.Line, msg: msg, key: key}}
		}
		return nil, problems{{msg: strings.TrimPrefix(err.Error(), "toml: ")}}
	}
	d.md = md
	sections := sectionsOf(&cfg)
	for name, prim := range top {
		switch target, ok := sections[name]; {
		case name == "peer":
			cfg.Peers = d.peers(prim)
		case name == "route":
			d.arrayTables(name, prim, &cfg.Routes)
		case name == "rule":
			d.arrayTables(name, prim, &cfg.Rules)
		case ok:
			d.table(name, prim, target)
		default:
			d.unknown(name, prim)
		}
	}
	for i := range cfg.Peers {
		cfg.Peers[i] = d.peerDefaults(i, cfg.Peers[i])
	}
	for _, e := range d.peerErrs {
		e.Name = cfg.Peers[e.Index].Name
		d.report(e)
	}
	for _, err := range cfg.validate() {
		d.report(err)
	}
	if files {
		for _, err := range cfg.checkFiles() {
			d.report(err)
		}
	}
	d.ps.sort()
	if len(d.ps) > 0 {
		return nil, d.ps
	}
	return &cfg, nil
}

// table decodes a section's keys into target (a pointer to its Config).
func (d *decoder) table(section string, prim toml.Primitive, target any) {
	var keys map[string]toml.Primitive
	if err := d.md.PrimitiveDecode(prim, &keys); err != nil {
		d.add(d.line(prim), section, section+": must be a table ([%s])", section)
		return
	}
	fields := tomlFields(target)
	for key, p := range keys {
		path := section + "." + key
		line := d.line(p)
		d.at[path] = line
		f, ok := fields[key]
		if !ok {
			named := section + "." + tomlKey(key) // as the operator wrote it
			d.add(line, named, "%s: unknown key", named)
			continue
		}
		d.decode(path, line, p, f)
	}
}

// peers decodes the [[peer]] tables.
func (d *decoder) peers(prim toml.Primitive) []peers.Spec {
	var tables []map[string]toml.Primitive
	if err := d.md.PrimitiveDecode(prim, &tables); err != nil {
		d.add(d.line(prim), "peer", "peer: must be an array of tables ([[peer]])")
		return nil
	}
	// The decoder keeps one position per key path, so keys of different
	// [[peer]] tables share one; the i-th table's lines come from a scan
	// of the file's table headers instead.
	lines := tableLines(d.src, "peer")
	specs := make([]peers.Spec, len(tables))
	d.peerKeys = make([]map[string]bool, len(tables))
	for i, keys := range tables {
		d.peerKeys[i] = map[string]bool{}
		fields := tomlFields(&specs[i])
		for key, p := range keys {
			path := fmt.Sprintf("peer[%d].%s", i, key)
			line := 0
			if i < len(lines) {
				line = lines[i].keys[key]
				d.at[fmt.Sprintf("peer[%d]", i)] = lines[i].header
			}
			d.at[path] = line
			d.peerKeys[i][key] = true
			f, ok := fields[key]
			if !ok {
				named := "peer." + tomlKey(key)
				d.add(line, named, "%s: unknown key", named)
				continue
			}
			if msg := d.decodeErr(p, f); msg != "" {
				d.peerErrs = append(d.peerErrs, &conf.Error{Section: "peer", Index: i, Key: key, Msg: msg})
			}
		}
	}
	return specs
}

// peerDefaults fills a peer's defaults; an explicit zero where zero would
// mean "inherit" or "default" is kept, for validation to refuse.
func (d *decoder) peerDefaults(i int, raw peers.Spec) peers.Spec {
	s := raw.WithDefaults()
	set := d.peerKeys[i]
	if set["weight"] {
		s.Weight = raw.Weight
	}
	if set["port"] {
		s.Port = raw.Port
		if raw.Name == "" && raw.Host != "" {
			s.Name = s.Addr()
		}
	}
	bad := func(key, format string, args ...any) {
		d.report(&conf.Error{Section: "peer", Index: i, Name: s.Name, Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	if set["connect_fail_limit"] && raw.ConnectFailLimit < 1 {
		bad("connect_fail_limit", "must be at least 1, got %d", raw.ConnectFailLimit)
	}
	if set["connect_timeout"] && raw.ConnectTimeout <= 0 {
		bad("connect_timeout", "must be positive, got %s", raw.ConnectTimeout)
	}
	return s
}

// decode decodes one key's value into its field.
func (d *decoder) decode(path string, line int, p toml.Primitive, f reflect.Value) {
	if msg := d.decodeErr(p, f); msg != "" {
		d.add(line, path, "%s: %s", path, msg)
	}
}

// decodeErr decodes one value into its field, returning what was wrong
// with it ("" when nothing was).
func (d *decoder) decodeErr(p toml.Primitive, f reflect.Value) string {
	var raw any
	if d.md.PrimitiveDecode(p, &raw) == nil {
		if where, bare := bareDuration(raw, f.Type()); bare {
			return where + `want a duration such as "30s", not a bare number (which would be read as nanoseconds)`
		}
	}
	err := d.md.PrimitiveDecode(p, f.Addr().Interface())
	if err == nil {
		return ""
	}
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return pe.Message
	}
	return "wrong type: want " + kindName(f.Type())
}

// unknown reports a top-level key or section nobody owns.
func (d *decoder) unknown(name string, prim toml.Primitive) {
	var keys map[string]toml.Primitive
	n := tomlKey(name)
	if d.md.PrimitiveDecode(prim, &keys) == nil {
		line := d.tableLine(name)
		d.add(line, n, "%s: unknown key", n)
		for key, p := range keys {
			d.add(d.line(p), n+"."+tomlKey(key), "%s.%s: unknown key", n, tomlKey(key))
		}
		return
	}
	d.add(d.line(prim), n, "%s: unknown key", n)
}

// tomlKey is key as a problem names it: bare when TOML allows it bare,
// else quoted (an empty key, or one with dots or spaces in it, would
// otherwise read as no key or as another one).
func tomlKey(key string) string {
	if key == "" || strings.TrimLeft(key, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") != "" {
		return strconv.Quote(key)
	}
	return key
}

// report files a validation error at its key's line.
func (d *decoder) report(err error) {
	var ce *conf.Error
	if !errors.As(err, &ce) {
		d.add(0, "?", "%v", err) // every package names its keys; see FuzzParseConfig
		return
	}
	line := 0
	if isArray(ce.Section) {
		line = d.at[fmt.Sprintf("%s[%d].%s", ce.Section, ce.Index, ce.Key)]
		if line == 0 {
			line = d.at[fmt.Sprintf("%s[%d]", ce.Section, ce.Index)]
		}
	} else {
		line = d.at[ce.Path()]
		if line == 0 {
			line = d.tableLine(ce.Section)
		}
	}
	d.ps = append(d.ps, problem{line: line, msg: ce.Error(), key: ce.Path()})
}

func (d *decoder) add(line int, key, format string, args ...any) {
	d.ps = append(d.ps, problem{line: line, msg: fmt.Sprintf(format, args...), key: key})
}

// probe is a value every decode refuses: the refusal is a ParseError that
// carries the decoder's position of the key (its only exported form).
type probe struct{}

var errProbe = errors.New("probe")

func (*probe) UnmarshalText([]byte) error { return errProbe }

// line is where a key's value is, from the decoder's own position of it.
func (d *decoder) line(p toml.Primitive) int {
	var pe toml.ParseError
	for _, target := range []any{&probe{}, &[]probe{}} {
		if err := d.md.PrimitiveDecode(p, target); errors.As(err, &pe) {
			return pe.Position.Line
		}
	}
	var keys map[string]toml.Primitive
	if d.md.PrimitiveDecode(p, &keys) == nil {
		best := 0
		for _, kp := range keys {
			if l := d.line(kp); l > 0 && (best == 0 || l < best) {
				best = l
			}
		}
		return best
	}
	return 0
}

// tableLine is the line of the first key of a section, or 0.
func (d *decoder) tableLine(section string) int {
	best := 0
	for k, l := range d.at {
		if strings.HasPrefix(k, section+".") && l > 0 && (best == 0 || l < best) {
			best = l
		}
	}
	return best
}

// validate runs every section's own validation and the cross-section checks.
func (c *fileConfig) validate() []error {
	var es conf.Errors
	es.Add(c.Proxy.Validate())
	es.Add(c.Access.Validate())
	es.Add(c.Health.Validate())
	es.Add(c.Selection.Validate())
	es.Add(c.Admin.Validate())
	es.Add(c.Cache.Validate())
	es.Add(c.Fleet.Validate())
	es.Add(c.ICP.Validate())
	es.Add(c.Auth.Validate())
	es.Add(c.Log.Validate())
	es.Add(peers.ValidateSpecs(c.Peers))
	if _, err := c.routes(); err != nil {
		es.Add(err)
	}
	if _, err := forwarding.CompileRules(c.Rules); err != nil {
		es.Add(err)
	}

	if c.Proxy.Listen == c.Admin.Listen && !strings.HasSuffix(c.Proxy.Listen, ":0") {
		es.Addf("admin", "listen", "%q is also proxy.listen", c.Admin.Listen)
	}
	return es
}

// checkFiles reads the files the config names: the peers' certificates,
// the TLS listener's, the htpasswd file.
func (c *fileConfig) checkFiles() []error {
	var es conf.Errors
	if _, err := buildPeerTLS(c.Peers); err != nil {
		es.Add(err)
	}
	es.Add(checkClientTLS(c.Proxy.TLSCert, c.Proxy.TLSKey))
	es.Add(forwarding.CheckOutgoingAddress(c.Proxy.OutgoingAddress))
	if _, err := auth.Load(c.Auth); err != nil {
		es.Add(&conf.Error{Section: "auth", Key: "basic_users", Msg: strings.TrimPrefix(err.Error(), "auth.basic_users: ")})
	}
	return append(es, c.checkPaths()...)
}

// peerOptions builds the registry options from the config.
func (c *fileConfig) peerOptions(log logrus.FieldLogger) peers.Options {
	return peers.Options{Health: c.Health, ConnectTimeout: c.Proxy.ConnectTimeout, ReadTimeout: c.Proxy.ReadTimeout, Log: log}
}

// plannerOptions builds the selection options from the config.
func (c *fileConfig) plannerOptions() selection.Options {
	routes, _ := c.routes() // validated before use
	return selection.Options{Policy: c.Selection.Policy, Direct: c.Proxy.Direct, MaxTries: c.Proxy.ForwardMaxTries, Routes: routes}
}

// routes compiles [[route]] against the configured peers.
func (c *fileConfig) routes() ([]selection.Route, error) {
	names := map[string]bool{}
	for _, p := range c.Peers {
		names[p.Name] = true
	}
	return selection.CompileRoutes(c.Routes, names)
}

// rules compiles [[rule]] (validated before use).
func (c *fileConfig) rules() []forwarding.Rule {
	rs, _ := forwarding.CompileRules(c.Rules)
	return rs
}

// warnings are what a valid config may still get wrong, printed by -check
// and logged at start.
func (c *fileConfig) warnings() []string {
	var w []string
	for _, p := range c.Peers {
		if p.Login != "" && !p.TLS {
			w = append(w, fmt.Sprintf("peer %q: login is sent in clear text (no tls = true): anyone on the path to the peer can read it", p.Name))
		}
	}
	if t := c.Admin.Token; t != "" && tokenBits(t) < 128 {
		w = append(w, fmt.Sprintf("admin.token: about %d bits; a token under 128 bits can be guessed, use e.g. `openssl rand -base64 24`", tokenBits(t)))
	}
	return w
}

// tokenBits estimates a token's strength from its length and alphabet,
// as if each character were chosen at random from that alphabet.
func tokenBits(t string) int {
	var lower, upper, digit, other bool
	for _, r := range t {
		switch {
		case 'a' <= r && r <= 'z':
			lower = true
		case 'A' <= r && r <= 'Z':
			upper = true
		case '0' <= r && r <= '9':
			digit = true
		default:
			other = true
		}
	}
	size := 0
	for _, n := range []struct {
		has bool
		n   int
	}{{lower, 26}, {upper, 26}, {digit, 10}, {other, 32}} {
		if n.has {
			size += n.n
		}
	}
	if isHex(t) {
		size = 16
	}
	return int(float64(len(t)) * math.Log2(float64(max(size, 2))))
}

func isHex(t string) bool {
	for _, r := range t {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f' || 'A' <= r && r <= 'F') {
			return false
		}
	}
	return true
}

// policy compiles the destination policy. peerd's own listen, admin,
// fleet and ICP addresses are refused as destinations (deny_to_local); a
// wildcard listen address stands for every address of the host's
// interfaces.
func (c *fileConfig) policy() (*access.Policy, error) {
	var own []netip.AddrPort
	var local []netip.Addr
	for _, l := range []string{c.Proxy.Listen, c.Admin.Listen, c.Fleet.Bind, c.ICP.Listen, c.Proxy.TLSListen} {
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
