package config

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/peerd/peerd/forwarding"
	"github.com/peerd/peerd/internal/manpage"
	"github.com/peerd/peerd/peers"
	"github.com/peerd/peerd/selection"
)

// decoderKeys are the keys the decoder knows, by section ("proxy",
// "[[peer]]", "[[route]]", "[[rule]]").
func decoderKeys() map[string][]string {
	cfg := Default()
	out := map[string][]string{}
	for name, target := range Sections(&cfg) {
		for k := range Fields(target) {
			out[name] = append(out[name], k)
		}
	}
	for name, v := range map[string]any{"[[peer]]": &peers.Spec{}, "[[route]]": &selection.RouteSpec{}, "[[rule]]": &forwarding.RuleSpec{}} {
		for k := range Fields(v) {
			out[name] = append(out[name], k)
		}
	}
	return out
}

// docKeys reads the keys a markdown reference lists: the first column of
// its tables, under each "## [section]" heading.
func docKeys(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	section := ""
	head := regexp.MustCompile(`^## \[(\[?\w+\]?)\]$`)
	row := regexp.MustCompile("^\\| `(\\w+)` \\|")
	for _, l := range strings.Split(string(b), "\n") {
		if m := head.FindStringSubmatch(l); m != nil {
			section = m[1]
			if strings.HasPrefix(section, "[") {
				section = "[" + section + "]"
			}
			continue
		}
		if m := row.FindStringSubmatch(l); m != nil && section != "" {
			out[section] = append(out[section], m[1])
		}
	}
	return out
}

// exampleKeys reads the keys etc/peerd.toml shows, by section: set in a
// table, or named in its comments (the [[peer]] key list, the commented
// [[route]] and [[rule]] examples).
func exampleKeys(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("../../../../etc/peerd.toml")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	section := ""
	set := regexp.MustCompile(`^(\w+) = `)
	commented := regexp.MustCompile(`^# (\w+) += `)  // a commented example
	listed := regexp.MustCompile(`^#   (\w+)(\s|,)`) // the [[peer]] key list
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]"):
			section = strings.Trim(l, "[]")
			if strings.HasPrefix(l, "[[") {
				section = l
			}
			continue
		case strings.HasPrefix(l, "# Peers, in order"):
			section = "[[peer]]"
			continue
		case strings.HasPrefix(l, "# [[route]]"):
			section = "[[route]]"
			continue
		case strings.HasPrefix(l, "# [[rule]]"):
			section = "[[rule]]"
			continue
		}
		if m := set.FindStringSubmatch(l); m != nil {
			out[section] = append(out[section], m[1])
		}
		if m := commented.FindStringSubmatch(l); m != nil {
			out[section] = append(out[section], m[1])
		}
		if m := listed.FindStringSubmatch(l); m != nil && section == "[[peer]]" {
			out[section] = append(out[section], m[1])
			if m[2] == "," { // "tls_cert, tls_key"
				if rest := strings.SplitN(l, ",", 2); len(rest) == 2 {
					out[section] = append(out[section], strings.Fields(rest[1])[0])
				}
			}
		}
	}
	return out
}

// TestReferenceCoversEveryKey: every key the decoder knows is in
// docs/configuration.md and etc/peerd.toml, and every key they show is
// one the decoder knows (the reference cannot drift from the code).
func TestReferenceCoversEveryKey(t *testing.T) {
	code := decoderKeys()
	doc := docKeys(t, "../../../../docs/configuration.md")
	example := exampleKeys(t)
	// A [[rule]]'s match keys are [[route]]'s, documented there once.
	matchKeys := code["[[route]]"]
	for section, keys := range code {
		for _, k := range keys {
			inDoc := slices.Contains(doc[section], k) || section == "[[rule]]" && slices.Contains(matchKeys, k) && slices.Contains(doc["[[route]]"], k)
			if !inDoc {
				t.Errorf("%s %s: not in docs/configuration.md", section, k)
			}
			inExample := slices.Contains(example[section], k) || section == "[[rule]]" && slices.Contains(example["[[route]]"], k)
			if !inExample {
				t.Errorf("%s %s: not in etc/peerd.toml", section, k)
			}
		}
	}
	for _, shown := range []struct {
		name string
		keys map[string][]string
	}{{"docs/configuration.md", doc}, {"etc/peerd.toml", example}} {
		for section, keys := range shown.keys {
			for _, k := range keys {
				if !slices.Contains(code[section], k) {
					t.Errorf("%s shows %s %s, which the decoder does not know", shown.name, section, k)
				}
			}
		}
	}
}

// TestManPageCoversEveryKey: peerd.toml(5) names every key the reference
// does (it is made from it).
func TestManPageCoversEveryKey(t *testing.T) {
	b, err := os.ReadFile("../../../../man/peerd.toml.5")
	if err != nil {
		t.Fatal(err)
	}
	for section, keys := range docKeys(t, "../../../../docs/configuration.md") {
		for _, k := range keys {
			if !strings.Contains(string(b), `\fB`+k+`\fR`) {
				t.Errorf("%s %s: not in man/peerd.toml.5", section, k)
			}
		}
	}
}

// TestEveryKeyIsExplained: no key of the reference or the man page has an
// empty meaning (quick_abort_max and quick_abort_pct had none).
func TestEveryKeyIsExplained(t *testing.T) {
	doc, err := os.ReadFile("../../../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `(\\w+)` \\|[^|]*\\|(.*)\\|$")
	for _, l := range strings.Split(string(doc), "\n") {
		if m := row.FindStringSubmatch(l); m != nil && strings.TrimSpace(m[2]) == "" {
			t.Errorf("docs/configuration.md: %s has no meaning", m[1])
		}
	}
	man, err := os.ReadFile("../../../../man/peerd.toml.5")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(man), "\n")
	for i, l := range lines {
		if l == ".TP" && i+2 < len(lines) && strings.TrimSpace(lines[i+2]) == "" {
			t.Errorf("peerd.toml(5): %s has no meaning", lines[i+1])
		}
	}
}

// TestManPageIsMadeFromTheReference: man/peerd.toml.5 is what `make man`
// makes of docs/configuration.md (one text, two forms).
func TestManPageIsMadeFromTheReference(t *testing.T) {
	md, err := os.ReadFile("../../../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile("../../../../man/peerd.toml.5")
	if err != nil {
		t.Fatal(err)
	}
	date := regexp.MustCompile(`^\.TH PEERD\.TOML 5 "([^"]*)"`).FindSubmatch(page)
	if date == nil {
		t.Fatal("man/peerd.toml.5 does not open with its .TH line")
	}
	if want := manpage.FromMarkdown(md, string(date[1])); string(want) != string(page) {
		t.Fatal("man/peerd.toml.5 is not what docs/configuration.md makes: run make man")
	}
}
