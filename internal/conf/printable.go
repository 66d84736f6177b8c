package conf

// This file holds Printable, which makes text from a config, a squid.conf
// or the admin API safe to print on one line of a terminal or a file.

import "strings"

// Printable makes a note safe for a TOML comment: valid UTF-8, no
// control characters.
func Printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}
