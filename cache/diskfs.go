package cache

// This file holds how the disk store opens what is under its directory:
// nothing there is trusted to be what its name says. A symbolic link is
// never followed (a LOCK link would have its target truncated, an
// objects/XX link would let the sweep delete files elsewhere), and a
// directory is checked with lstat before it is used.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// errNotDir is a store path that is not a plain directory.
var errNotDir = errors.New("not a directory (a symbolic link or another file is not followed)")

// openNoFollow opens path without following a symbolic link at its end.
func openNoFollow(path string, flag int) (*os.File, error) {
	return os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o640)
}

// createNoFollow creates a new file (never an existing one, nor through
// a link).
func createNoFollow(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o640)
}

// plainDir makes dir when it is missing (mode 0750) and checks that it
// is a directory of its own, not a link to one.
func plainDir(dir string) error {
	err := os.Mkdir(dir, 0o750)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: %w", dir, errNotDir)
	}
	return nil
}

// objectDir makes the objects/XX directory a file at path goes in.
func (d *disk) objectDir(path string) error { return plainDir(filepath.Dir(path)) }

// checkObjectDirs checks the store's object directories once, at start:
// one that is not a plain directory is taken out of the way (a link is
// removed, never followed) and made again.
func (d *disk) checkObjectDirs() {
	for i := range 256 {
		dir := filepath.Join(d.dir, "objects", fmt.Sprintf("%02x", i))
		st, err := os.Lstat(dir)
		if err != nil || st.IsDir() {
			continue
		}
		d.log.WithField("path", dir).Warn("cache disk: an object directory is not a plain directory; removed")
		os.Remove(dir)
	}
}
