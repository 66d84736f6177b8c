// Package conf is what every package's Config shares: a problem that names
// the key it is about, so that cmd/peerd can put a line number on it from
// the TOML decoder's own positions, never by reading error text.
package conf

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Error is one config problem.
type Error struct {
	// Section and Key name the key: "health" and "connect_fail_limit".
	// For an array of tables ([[peer]]) Section is the array's name, Index
	// the table's position in it and Name its name (for the message).
	Section string
	Key     string
	Index   int
	Name    string
	Msg     string
}

func (e *Error) Error() string {
	if e.Section == "peer" {
		return fmt.Sprintf("peer[%d] %q: %s: %s", e.Index, e.Name, e.Key, e.Msg)
	}
	if e.Section == "route" || e.Section == "rule" {
		return fmt.Sprintf("%s[%d].%s: %s", e.Section, e.Index, e.Key, e.Msg)
	}
	return e.Section + "." + e.Key + ": " + e.Msg
}

// Path is the key's dotted path ("health.connect_fail_limit",
// "peer.port").
func (e *Error) Path() string { return e.Section + "." + e.Key }

// Errorf makes a problem about section.key.
func Errorf(section, key, format string, args ...any) *Error {
	return &Error{Section: section, Key: key, Index: -1, Msg: fmt.Sprintf(format, args...)}
}

// Errors collects problems; Err returns them joined (nil for none).
type Errors []error

// Add appends problem(s); nil is ignored and joined errors are flattened.
func (es *Errors) Add(err error) {
	if err == nil {
		return
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			es.Add(e)
		}
		return
	}
	*es = append(*es, err)
}

// Addf appends a problem about section.key.
func (es *Errors) Addf(section, key, format string, args ...any) {
	es.Add(Errorf(section, key, format, args...))
}

// Err joins the problems.
func (es Errors) Err() error { return errors.Join(es...) }

// ByteSize is a size in bytes, written in TOML as "64KiB", "1MiB", "512".
type ByteSize int64

var sizeUnits = []struct {
	suffix string
	mult   int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}}

// UnmarshalText parses a size. KB, MB and GB are refused: Squid reads
// them as powers of two and most of the world as powers of ten, so either
// reading would surprise someone; the error says how to write each.
func (b *ByteSize) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	for _, u := range []string{"KB", "MB", "GB", "kB", "kb", "mb", "gb"} {
		if n, ok := strings.CutSuffix(s, u); ok {
			n = strings.TrimSpace(n)
			return fmt.Errorf("size %q is ambiguous: write %q (as Squid reads %s) or the bytes", string(text), n+strings.ToUpper(u[:1])+"iB", u)
		}
	}
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("invalid size %q (want e.g. 64KiB, 1MiB or 512)", string(text))
	}
	if n > math.MaxInt64/mult {
		return fmt.Errorf("size %q is too large (at most 8EiB)", string(text))
	}
	*b = ByteSize(n * mult)
	return nil
}

// MarshalText prints the size in the largest exact binary unit.
func (b ByteSize) MarshalText() ([]byte, error) {
	for _, u := range sizeUnits[:3] {
		if b > 0 && int64(b)%u.mult == 0 && int64(b) >= u.mult {
			return []byte(fmt.Sprintf("%d%s", int64(b)/u.mult, u.suffix)), nil
		}
	}
	return []byte(strconv.FormatInt(int64(b), 10)), nil
}

// String prints the size as MarshalText does.
func (b ByteSize) String() string {
	t, _ := b.MarshalText()
	return string(t)
}
