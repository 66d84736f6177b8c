package config

// This file holds the decoding of arrays of tables ([[peer]], [[route]],
// [[rule]]) key by key, with each key's line found by a scan of the file
// (the TOML decoder keeps one position per key path, shared by every table
// of an array), and the reflection helpers the decoder uses.

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/peerd/peerd/forwarding"
	"github.com/peerd/peerd/icp"
	"github.com/peerd/peerd/internal/conf"
	"github.com/peerd/peerd/peers"
)

// isArray says whether a config section is an array of tables, whose
// Problems are reported per table ("route[2].peers").
func isArray(section string) bool {
	return section == "peer" || section == "route" || section == "rule"
}

// arrayTables decodes the [[name]] tables into *out (a pointer to a slice
// of structs with toml tags): unknown keys and wrong types are Problems at
// their lines, and decoding goes on past them.
func (d *decoder) arrayTables(name string, prim toml.Primitive, out any) {
	var tables []map[string]toml.Primitive
	if err := d.md.PrimitiveDecode(prim, &tables); err != nil {
		d.add(d.line(prim), name, "%s: must be an array of tables ([[%s]])", name, name)
		return
	}
	lines := tableLines(d.src, name)
	slice := reflect.ValueOf(out).Elem()
	slice.Set(reflect.MakeSlice(slice.Type(), len(tables), len(tables)))
	for i, keys := range tables {
		fields := Fields(slice.Index(i).Addr().Interface())
		for key, p := range keys {
			line := 0
			if i < len(lines) {
				line = lines[i].keys[key]
				d.at[fmt.Sprintf("%s[%d]", name, i)] = lines[i].header
			}
			d.at[fmt.Sprintf("%s[%d].%s", name, i, key)] = line
			f, ok := fields[key]
			if !ok {
				d.report(&conf.Error{Section: name, Index: i, Key: tomlKey(key), Msg: "unknown key"})
				continue
			}
			if msg := d.decodeErr(p, f); msg != "" {
				d.report(&conf.Error{Section: name, Index: i, Key: key, Msg: msg})
			}
		}
	}
}

// Fields maps the toml tags of the struct v points to onto its fields;
// an embedded struct's fields count as the outer struct's (as the TOML
// decoder reads them).
func Fields(v any) map[string]reflect.Value {
	rv := reflect.ValueOf(v).Elem()
	out := map[string]reflect.Value{}
	for i := 0; i < rv.NumField(); i++ {
		f := rv.Type().Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct && f.Tag.Get("toml") == "" {
			for k, v := range Fields(rv.Field(i).Addr().Interface()) {
				out[k] = v
			}
			continue
		}
		if tag, _, _ := strings.Cut(f.Tag.Get("toml"), ","); tag != "" && tag != "-" {
			out[tag] = rv.Field(i)
		}
	}
	return out
}

// durationTypes are the config types that hold a duration: a bare
// number in one is refused (the TOML decoder would read 30 as 30 ns, and
// Squid reads it as seconds, HAProxy as milliseconds).
var durationTypes = map[reflect.Type]bool{
	reflect.TypeOf(time.Duration(0)):         true,
	reflect.TypeOf(peers.FirstByteTimeout{}): true,
	reflect.TypeOf(forwarding.HedgeDelay{}):  true,
	reflect.TypeOf(icp.Timeout(0)):           true,
}

// bareDuration reports whether raw (a decoded TOML value) puts a number
// where t, or a field or element of t, holds a duration; where names the
// inner key ("min: "), if any.
func bareDuration(raw any, t reflect.Type) (where string, bare bool) {
	if durationTypes[t] {
		switch raw.(type) {
		case int64, float64:
			return "", true
		}
		return "", false
	}
	switch t.Kind() {
	case reflect.Pointer:
		return bareDuration(raw, t.Elem())
	case reflect.Slice:
		if rs, ok := raw.([]any); ok {
			for _, r := range rs {
				if where, bare := bareDuration(r, t.Elem()); bare {
					return where, true
				}
			}
		}
		if rs, ok := raw.([]map[string]any); ok {
			for _, r := range rs {
				if where, bare := bareDuration(r, t.Elem()); bare {
					return where, true
				}
			}
		}
	case reflect.Struct:
		m, ok := raw.(map[string]any)
		if !ok {
			return "", false
		}
		fields := Fields(reflect.New(t).Interface())
		for k, v := range m {
			if f, ok := fields[k]; ok {
				if where, bare := bareDuration(v, f.Type()); bare {
					return k + ": " + where, true
				}
			}
		}
	}
	return "", false
}

func kindName(t reflect.Type) string {
	switch {
	case t == reflect.TypeOf(time.Duration(0)):
		return "a duration such as \"30s\""
	case t.Kind() == reflect.Slice:
		return "an array"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "an integer"
	case t.Kind() == reflect.Float64:
		return "a number"
	}
	return "a string"
}

// arrayTable is where one [[peer]] (or [[route]], [[rule]]) table is in
// the file.
type arrayTable struct {
	header int
	keys   map[string]int
}

// tableLines scans the file for [[name]] tables and the lines of their keys.
// Only table headers and "key =" at the start of a line are read; a
// multi-line string is skipped whole.
func tableLines(src []byte, table string) []arrayTable {
	var out []arrayTable
	in := false
	inString := ""
	for i, raw := range strings.Split(string(src), "\n") {
		line := strings.TrimSpace(raw)
		if inString != "" {
			if strings.Count(line, inString)%2 == 1 {
				inString = ""
			}
			continue
		}
		for _, q := range []string{`"""`, `'''`} {
			if strings.Count(line, q)%2 == 1 {
				inString = q
			}
		}
		switch {
		case strings.HasPrefix(line, "["):
			name := strings.Trim(line, "[] \t")
			if c := strings.IndexByte(name, '#'); c >= 0 {
				name = strings.TrimSpace(strings.Trim(name[:c], "[] \t"))
			}
			in = strings.HasPrefix(line, "[[") && name == table
			if in {
				out = append(out, arrayTable{header: i + 1, keys: map[string]int{}})
			}
		case in:
			if key, _, ok := strings.Cut(line, "="); ok {
				key = strings.Trim(strings.TrimSpace(key), `"'`)
				if _, seen := out[len(out)-1].keys[key]; !seen {
					out[len(out)-1].keys[key] = i + 1
				}
			}
		}
	}
	return out
}
