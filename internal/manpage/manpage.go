// Package manpage makes peerd.toml(5) from docs/configuration.md, so that
// the reference and the man page are one text: `make man` writes it, and a
// test fails when the committed page is not what the reference makes.
//
// It reads the markdown subset the reference is written in: "# " (the
// title, dropped), "## " sections, paragraphs, "* " bullets (with
// indented continuation lines), and key tables ("| key | default |
// meaning |" or "| key | meaning |"), with `code` and **bold** inline.
package manpage

import (
	"bytes"
	"regexp"
	"strings"
)

// header and footer frame the page.
const header = `.TH PEERD.TOML 5 "%s" "peerd" "File Formats"
.SH NAME
peerd.toml \- the configuration file of peerd
.SH DESCRIPTION
`

const footer = `.SH SEE ALSO
.BR peerd (8)
.PP
The annotated example
.IR /etc/peerd/peerd.toml .
`

// FromMarkdown is the man page of the reference md, dated date (e.g.
// "December 2026").
func FromMarkdown(md []byte, date string) []byte {
	var b bytes.Buffer
	b.WriteString(strings.Replace(header, "%s", date, 1))
	lines := strings.Split(strings.ReplaceAll(string(md), "\r\n", "\n"), "\n")
	inPara, inBullet := false, false
	end := func() {
		if inPara || inBullet {
			b.WriteString(".PP\n")
		}
		inPara, inBullet = false, false
	}
	for _, l := range lines {
		t := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "# "):
			continue
		case strings.HasPrefix(l, "## "):
			end()
			b.WriteString(".SH \"" + strings.ToUpper(strings.TrimPrefix(l, "## ")) + "\"\n")
		case t == "":
			end()
		case strings.HasPrefix(t, "|---") || t == "| key | default | meaning |" || t == "| key | meaning |":
			continue
		case strings.HasPrefix(t, "| "):
			end()
			cells := splitRow(t)
			b.WriteString(".TP\n")
			if len(cells) == 3 {
				b.WriteString(inline(cells[0]) + " = " + inline(cells[1]) + "\n" + line(inline(cells[2])) + "\n")
			} else if len(cells) == 2 {
				b.WriteString(inline(cells[0]) + "\n" + line(inline(cells[1])) + "\n")
			}
		case strings.HasPrefix(l, "* "):
			if !inBullet {
				end()
			}
			inBullet = true
			b.WriteString(".IP \\(bu 2\n" + line(inline(strings.TrimPrefix(l, "* "))) + "\n")
		default:
			if !inPara && !inBullet {
				inPara = true
			}
			b.WriteString(line(inline(t)) + "\n")
		}
	}
	end()
	b.WriteString(footer)
	return b.Bytes()
}

// splitRow splits a table row on its unescaped pipes.
func splitRow(row string) []string {
	row = strings.TrimSuffix(strings.TrimPrefix(row, "|"), "|")
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(row); i++ {
		switch {
		case row[i] == '\\' && i+1 < len(row) && row[i+1] == '|':
			cur.WriteByte('|')
			i++
		case row[i] == '|':
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(row[i])
		}
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

var (
	code = regexp.MustCompile("`([^`]*)`")
	bold = regexp.MustCompile(`\*\*([^*]+)\*\*`)
)

// inline turns markdown's inline marks into roff's.
func inline(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, `\e|`, `|`)
	s = code.ReplaceAllStringFunc(s, func(m string) string {
		// A minus in code is a minus (an option, a range), not a hyphen.
		return `\fB` + strings.ReplaceAll(m[1:len(m)-1], "-", `\-`) + `\fR`
	})
	return bold.ReplaceAllString(s, `\fB$1\fR`)
}

// line keeps a text line from being read as a request (a leading dot or
// quote).
func line(s string) string {
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		return `\&` + s
	}
	return s
}
