package forwarding

import (
	"os"
	"slices"
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

// TestLogCodesAreOneList: the codes an unknown-code error lists are every
// code the compiler knows, and docs/configuration.md gives the same list.
func TestLogCodesAreOneList(t *testing.T) {
	for c := range logCodes {
		name := "%" + c
		if c == ">h" {
			name = "%{Header}>h"
		}
		if !slices.Contains(logCodeList, name) {
			t.Errorf("%s compiles but is not in the list errors and docs give", name)
		}
	}
	if len(logCodeList) != len(logCodes) {
		t.Errorf("the list has %d codes, the compiler %d", len(logCodeList), len(logCodes))
	}
	_, err := CompileLogFormat("%ts %zz")
	if err == nil || !strings.Contains(err.Error(), strings.Join(logCodeList, " ")) {
		t.Errorf("an unknown code: %v; want the list", err)
	}
	doc, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "codes peerd knows: "+strings.Join(logCodeList, " ")+",") {
		t.Errorf("docs/configuration.md does not give the codes as: %s", strings.Join(logCodeList, " "))
	}
}
