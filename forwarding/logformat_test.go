package forwarding

import (
	"strings"
	"testing"
)

// TestCompileLogFormat: the built-in names, a logformat of known codes
// with widths, and an unknown code refused naming it.
func TestCompileLogFormat(t *testing.T) {
	if f, err := CompileLogFormat("squid"); f != nil || err != nil {
		t.Fatalf("squid: %v %v; want the native fast path", f, err)
	}
	for _, s := range []string{"common", "combined", "%ts.%03tu %6tr %>a %Ss/%03>Hs %<st %rm %ru %un %Sh/%<a %mt", `%>a "%{User-Agent}>h" %%`} {
		if _, err := CompileLogFormat(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	for bad, want := range map[string]string{"%ts %bogus": "%bogus is not a code", "%>h": "needs a header name", "%{Host": "without its }"} {
		if _, err := CompileLogFormat(bad); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want an error with %q", bad, err, want)
		}
	}
}
