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

// TestPeerHosts: a host is a name or an address, without a port or
// brackets; one that ends in a number must be a valid IPv4 address.
func TestPeerHosts(t *testing.T) {
	for host, want := range map[string]string{
		"parent.example": "", "10.0.0.1": "", "::1": "", "2001:db8::1": "", "p1": "", "a.b-c.example.": "",
		"10.0.0.1:3128":     `has a port: write host = "10.0.0.1" and port = 3128`,
		"parent.example:80": `has a port: write host = "parent.example" and port = 80`,
		"[::1]:3128":        `has a port: write host = "::1" and port = 3128`,
		"[::1]":             "without brackets",
		"10.0.0.300":        "not a valid IPv4 address",
		"10.1":              "not a valid IPv4 address",
		"0x7f.1":            "not a valid IPv4 address",
		"host.123":          "not a valid IPv4 address",
		"a b":               "not a host name",
		"user@host":         "not a host name",
	} {
		got := hostProblem(host)
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("host %q: %q; want %q", host, got, want)
		}
	}
}
