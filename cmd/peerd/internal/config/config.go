package config

// This file holds the TOML file: the sections assembled from each package's
// Config, loading, and validation with line numbers.

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/peerd/peerd/tracing"

	"github.com/peerd/peerd/auth"

	"github.com/BurntSushi/toml"
	"github.com/sirupsen/logrus"

	"github.com/peerd/peerd/access"
	"github.com/peerd/peerd/admin"
	"github.com/peerd/peerd/cache"
	"github.com/peerd/peerd/fleet"
	"github.com/peerd/peerd/forwarding"
	"github.com/peerd/peerd/icp"
	"github.com/peerd/peerd/internal/conf"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
)

// File is the TOML file: each section owned by its package.
type File struct {
	Proxy     forwarding.Config     `toml:"proxy"`
	Access    access.Config         `toml:"access"`
	Health    peers.Config          `toml:"health"`
	Selection selection.Config      `toml:"selection"`
	Admin     admin.Config          `toml:"admin"`
	Cache     cache.Config          `toml:"cache"`
	Fleet     fleet.Config          `toml:"fleet"`
	ICP       icp.Config            `toml:"icp"`
	Auth      auth.Config           `toml:"auth"`
	Log       LogConfig             `toml:"log"`
	Trace     tracing.Config        `toml:"trace"`
	Peers     []peers.Spec          `toml:"peer"`
	Routes    []selection.RouteSpec `toml:"route"`
	Rules     []forwarding.RuleSpec `toml:"rule"`

	// path is the file the config was loaded from ("" for the embedded
	// default or bytes); secretFiles the files secrets were read from.
	path        string
	secretFiles []secretFile
}

// LogConfig is the [log] section.
type LogConfig struct {
	// Level is a logrus level: debug, info, warn, error.
	Level LogLevel `toml:"level"`
	// Format is text or json.
	Format LogFormat `toml:"format"`
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

// AccessFormat is the compiled access_log_format (validated).
func (c LogConfig) AccessFormat() *forwarding.LogFormat {
	f, _ := forwarding.CompileLogFormat(c.AccessLogFormat)
	return f
}

// LogLevel is a logrus level word.
type LogLevel logrus.Level

func (l *LogLevel) UnmarshalText(b []byte) error {
	v, err := logrus.ParseLevel(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a level (want debug, info, warn or error)", b)
	}
	*l = LogLevel(v)
	return nil
}

func (l LogLevel) MarshalText() ([]byte, error) { return logrus.Level(l).MarshalText() }

// LogFormat is the log's "text" or "json".
type LogFormat string

func (f *LogFormat) UnmarshalText(b []byte) error {
	if s := string(b); s == "text" || s == "json" {
		*f = LogFormat(s)
		return nil
	}
	return fmt.Errorf("%q is not a log format (want text or json)", b)
}

func (c LogConfig) Validate() error {
	if _, err := forwarding.CompileLogFormat(c.AccessLogFormat); err != nil {
		return conf.Errorf("log", "access_log_format", "%v", err)
	}
	return nil
}

// Default is the embedded default: every section's own defaults.
func Default() File {
	return File{
		Proxy:     forwarding.DefaultConfig(),
		Access:    access.DefaultConfig(),
		Health:    peers.DefaultConfig(),
		Selection: selection.DefaultConfig(),
		Admin:     admin.DefaultConfig(),
		Cache:     cache.DefaultConfig(),
		Fleet:     fleet.DefaultConfig(),
		ICP:       icp.DefaultConfig(),
		Auth:      auth.DefaultConfig(),
		Log:       LogConfig{Level: LogLevel(logrus.InfoLevel), Format: "text", StripQueryTerms: true, AccessLogFormat: "squid"},
		Trace:     tracing.DefaultConfig(),
	}
}

// Problem is one config error, with the line it is on when known.
type Problem struct {
	line int
	msg  string
	// key names what the Problem is about ("" only for a file that is not
	// TOML at all); every other Problem names a key.
	key string
}

func (p Problem) String() string {
	if p.line > 0 {
		return fmt.Sprintf("line %d: %s", p.line, p.msg)
	}
	return p.msg
}

// Problems is every error found in a config file, in file order.
type Problems []Problem

func (ps Problems) Error() string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, "; ")
}

// sort puts Problems in file order (those without a line last), then by
// message, so that -check prints the same thing on every run.
func (ps Problems) sort() {
	slices.SortStableFunc(ps, func(a, b Problem) int {
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
	ps  Problems
	// at is where each decoded key is: "health.connect_fail_limit" and,
	// for peers, "peer[2].port".
	at map[string]int
	// peerKeys says which keys each [[peer]] table sets.
	peerKeys []map[string]bool
	// peerErrs are decode errors of [[peer]] keys, reported once the
	// peer's name (perhaps defaulted from host:port) is known.
	peerErrs []*conf.Error
}

// Parse decodes and validates src, returning every Problem found.
func Parse(src []byte) (*File, Problems) { return ParseFiles(src, true) }

// ParseFiles is Parse; files says whether the files the config
// names (certificates, the htpasswd file) are read and checked too
// (import-squid checks a config meant for another machine: words only).
func ParseFiles(src []byte, files bool) (*File, Problems) {
	cfg := Default()
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
			return nil, Problems{{line: pe.Position.Line, msg: msg, key: key}}
		}
		return nil, Problems{{msg: strings.TrimPrefix(err.Error(), "toml: ")}}
	}
	d.md = md
	sections := Sections(&cfg)
	for name, prim := range top {
		switch target, ok := sections[name]; {
		case name == "peer":
			cfg.Peers = d.peers(prim)
		case name == "route":
			d.arrayTables(name, prim, &cfg.Routes)
		case name == "rule":
			d.arrayTables(name, prim, &cfg.Rules)
			for i, t := range tableLines(src, "rule") {
				if i < len(cfg.Rules) {
					cfg.Rules[i].Line = t.header
				}
			}
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
	d.dependentDefaults(&cfg)
	for _, err := range cfg.validate() {
		d.report(err)
	}
	if files {
		for _, err := range cfg.readSecrets() {
			d.report(err)
		}
		for _, err := range cfg.checkFiles() {
			d.report(err)
		}
	}
	d.ps = d.ps.typeErrorsAlone()
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
	fields := Fields(target)
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
		fields := Fields(&specs[i])
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

// tomlKey is key as a Problem names it: bare when TOML allows it bare,
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
	d.ps = append(d.ps, Problem{line: line, msg: ce.Error(), key: ce.Path()})
}

func (d *decoder) add(line int, key, format string, args ...any) {
	d.ps = append(d.ps, Problem{line: line, msg: fmt.Sprintf(format, args...), key: key})
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

// Sections maps each TOML section (other than [[peer]]) to its value
// in c: the decoder fills them and the reload diff compares them.
func Sections(c *File) map[string]any {
	return map[string]any{
		"proxy": &c.Proxy, "access": &c.Access, "health": &c.Health, "selection": &c.Selection,
		"admin": &c.Admin, "cache": &c.Cache, "fleet": &c.Fleet, "icp": &c.ICP, "auth": &c.Auth, "log": &c.Log,
		"trace": &c.Trace,
	}
}

// Load reads path, or uses the built-in defaults when path is "".
func Load(path string) (*File, Problems) {
	if path == "" {
		return Parse(nil)
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, Problems{{msg: err.Error()}}
	}
	cfg, ps := Parse(src)
	if cfg != nil {
		cfg.path = path
		for i := range cfg.Rules {
			cfg.Rules[i].File = filepath.Base(path)
		}
	}
	return cfg, ps
}
