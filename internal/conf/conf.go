// Package conf is what every package's Config shares: a problem that names
// the key it is about, so that cmd/peerd can put a line number on it from
// the TOML decoder's own positions, never by reading error text.
package conf

import (
	"errors"
	"fmt"
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

// Flatten splits a (joined) error into its problems.
func Flatten(err error) []error {
	var es Errors
	es.Add(err)
	return es
}
