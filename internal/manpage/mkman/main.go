// Command mkman writes peerd.toml(5) from the configuration reference:
//
//	go run ./internal/manpage/mkman docs/configuration.md man/peerd.toml.5
//
// (make man). The page is dated with this month.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/peerd/peerd/internal/manpage"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: mkman REFERENCE.md PAGE.5")
		os.Exit(2)
	}
	md, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkman:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(os.Args[2], manpage.FromMarkdown(md, time.Now().Format("January 2006")), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "mkman:", err)
		os.Exit(1)
	}
}
