package squidimport

// This file holds how import-squid reads squid.conf: lines continued by a
// trailing backslash, comments, and "include" (one or more paths or
// globs, relative to the including file's directory, nested up to
// Squid's 16 levels; a loop, a glob that matches nothing or a file that
// cannot be read stops the import, as it stops Squid). Each directive is
// numbered in the order read, across files; where() turns that number
// back into the file and line an operator can open.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// source is where squid.conf and the files it includes are read from
// (the file system; tests give their own).
type source interface {
	Open(name string) (io.ReadCloser, error)
	Glob(pattern string) ([]string, error)
}

// osFiles reads the file system.
type osFiles struct{}

func (osFiles) Open(name string) (io.ReadCloser, error) { return os.Open(name) }
func (osFiles) Glob(pattern string) ([]string, error)   { return filepath.Glob(pattern) }

// maxIncludeDepth is Squid's: a file included through 16 others is refused.
const maxIncludeDepth = 16

// span says that the directives numbered from first on come from file,
// its line line0+1 being the first's.
type span struct {
	first, line0 int
	file         string
}

// squidReader reads one squid.conf and what it includes into s.
type squidReader struct {
	s     *squidImport
	src   source
	stack []string // the files being read, outermost first
	n     int      // the number of the last line read, across files
}

// where names directive number n: "line 12" in the file given on the
// command line, "/etc/squid/conf.d/deny.conf line 3" in an included one.
func (s *squidImport) where(n int) string {
	i := sort.Search(len(s.spans), func(i int) bool { return s.spans[i].first > n }) - 1
	if i < 0 {
		return fmt.Sprintf("line %d", n)
	}
	sp := s.spans[i]
	line := sp.line0 + n - sp.first + 1
	if i == 0 || sp.file == s.spans[0].file {
		return fmt.Sprintf("line %d", line)
	}
	return fmt.Sprintf("%s line %d", sp.file, line)
}

// file reads name (already resolved) and, through include lines, what it
// names.
func (rd *squidReader) file(name string, r io.Reader) error {
	abs, err := filepath.Abs(name)
	if err != nil {
		abs = filepath.Clean(name)
	}
	if i := slices.Index(rd.stack, abs); i >= 0 {
		return fmt.Errorf("include loop: %s", strings.Join(append(rd.stack[i:], abs), " includes "))
	}
	if len(rd.stack) > maxIncludeDepth {
		return fmt.Errorf("%s: included more than %d levels deep (Squid refuses it too)", name, maxIncludeDepth)
	}
	rd.stack = append(rd.stack, abs)
	defer func() { rd.stack = rd.stack[:len(rd.stack)-1] }()
	local := 0
	resume := func() {
		rd.s.spans = append(rd.s.spans, span{first: rd.n + 1, line0: local, file: name})
	}
	resume()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	// pending is a line continued by trailing backslashes, built once (a
	// string grown line by line was quadratic: 8,000 lines took 5 s).
	var pending strings.Builder
	for sc.Scan() {
		rd.n++
		local++
		raw := sc.Text()
		// A trailing backslash continues the line (squid.conf allows it).
		if strings.HasSuffix(raw, "\\") {
			if pending.Len()+len(raw) > maxSquidLine {
				return fmt.Errorf("%s: a line continued past %d bytes", rd.s.where(rd.n), maxSquidLine)
			}
			pending.WriteString(strings.TrimSuffix(raw, "\\"))
			pending.WriteByte(' ')
			continue
		}
		line := raw
		if pending.Len() > 0 {
			pending.WriteString(raw)
			line = pending.String()
			pending.Reset()
		}
		// A comment starts at a word that begins with '#' (a '#' inside a
		// word, as in a refresh_pattern's "([#&?]|$)", is the word's).
		w := strings.Fields(line)
		for i, f := range w {
			if strings.HasPrefix(f, "#") {
				w = w[:i]
				break
			}
		}
		if len(w) == 0 {
			continue
		}
		if w[0] == "include" {
			n := rd.n
			if err := rd.include(name, w[1:]); err != nil {
				return fmt.Errorf("%s: %w", rd.s.where(n), err)
			}
			resume()
			continue
		}
		sl := squidLine{n: rd.n, directive: w[0]}
		if len(w) > 1 {
			sl.arg = w[1]
		}
		rd.s.lines = append(rd.s.lines, sl)
		if err := rd.s.directive(rd.n, w); err != nil {
			return fmt.Errorf("%s: %w", rd.s.where(rd.n), err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// include reads "include PATH..." of the file from: each path or glob
// relative to from's directory, a glob's files in name order.
func (rd *squidReader) include(from string, paths []string) error {
	if len(paths) == 0 {
		return fmt.Errorf("include names no file")
	}
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(from), p)
		}
		names := []string{p}
		if strings.ContainsAny(p, "*?[") {
			m, err := rd.src.Glob(p)
			if err != nil {
				return fmt.Errorf("include %s: %v", p, err)
			}
			if len(m) == 0 {
				return fmt.Errorf("include %s matches no file (Squid stops there too)", p)
			}
			sort.Strings(m)
			names = m
		}
		for _, name := range names {
			f, err := rd.src.Open(name)
			if err != nil {
				return fmt.Errorf("include %s cannot be read: %v", name, unwrapPath(err))
			}
			err = rd.file(name, f)
			f.Close()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// unwrapPath is an open error without the path it repeats.
func unwrapPath(err error) error {
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
