package peers

import (
	"strings"
	"testing"
)

// TestPeerNames: names go into URL paths, metric labels, logs and the
// terminal: only a safe alphabet is accepted.
func TestPeerNames(t *testing.T) {
	for name, ok := range map[string]bool{
		"p1": true, "parent-1.example.com:3128": true, "[::1]:3128": true, "a_b": true,
		"a/b": false, "../admin": false, "p1\x1b[2J": false, "p 1": false, "p\n1": false, "ünicode": false,
		strings.Repeat("a", 256): false,
	} {
		err := Spec{Name: name, Host: "127.0.0.1", Port: 3128, Weight: 1}.Validate(0)
		if (err == nil) != ok {
			t.Errorf("name %q: %v; want accepted %v", name, err, ok)
		}
	}
	if err := (Spec{Name: "p", Host: "a\x00b", Port: 1, Weight: 1}).Validate(0); err == nil {
		t.Error("a host with a control character was accepted")
	}
}
