package config

// This file holds the checks -check makes of the paths the config names
// for peerd to write: what start-up would fail on must fail -check too
// (a systemd ExecStartPre that passes and an ExecStart that fails is the
// worst of both). Nothing is created here: -check only looks.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/peerd/peerd/internal/conf"
)

// checkPaths reports, by key, a file peerd writes whose directory is
// missing or not writable, or that is there and is not a regular file;
// and a disk store whose directory cannot be made or used.
func (c *File) checkPaths() []error {
	var es conf.Errors
	for _, f := range []struct{ section, key, path string }{
		{"log", "access_log", c.Log.AccessLog},
		{"proxy", "pid_file", c.Proxy.PIDFile},
		{"proxy", "state_file", c.Proxy.StateFile},
	} {
		if f.path == "" {
			continue
		}
		if f.key == "state_file" && missingDir(f.path) {
			continue // a warning (stateDirWarning): start-up goes on without it
		}
		if err := checkWritableFile(f.path); err != nil {
			es.Addf(f.section, f.key, "%v", err)
		}
	}
	if c.Cache.Disk != "" {
		if err := checkStoreDir(c.Cache.Disk); err != nil {
			es.Addf("cache", "disk", "%v", err)
		}
	}
	return es
}

// missingDir reports whether path's directory does not exist.
func missingDir(path string) bool {
	_, err := os.Stat(filepath.Dir(path))
	return errors.Is(err, fs.ErrNotExist)
}

// stateDirWarning is -check's warning for a state_file whose directory
// is not there: peerd starts, but keeps no operator state until it is.
func (c *File) stateDirWarning() []string {
	if p := c.Proxy.StateFile; p != "" && missingDir(p) {
		return []string{fmt.Sprintf("proxy.state_file: directory %s does not exist (yet): admin drains and overrides will not survive a restart until it does (systemd's StateDirectory=peerd makes /var/lib/peerd)", filepath.Dir(p))}
	}
	return nil
}

// checkWritableFile: path's directory exists and may be written, and
// path, when it is there, is a regular file (or a device such as
// /dev/stdout, for a log) that may be written.
func checkWritableFile(path string) error {
	dir := filepath.Dir(path)
	if err := writableDir(dir); err != nil {
		return err
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case st.IsDir():
		return fmt.Errorf("%s is a directory", path)
	case st.Mode()&fs.ModeNamedPipe != 0 || st.Mode()&fs.ModeSocket != 0:
		return fmt.Errorf("%s is a %s, not a regular file", path, FileKind(st.Mode()))
	}
	if err := syscall.Access(path, 2 /* W_OK */); err != nil {
		return fmt.Errorf("%s cannot be written: %v", path, err)
	}
	return nil
}

// writableDir: dir exists, is a directory and may be written.
func writableDir(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("directory %s does not exist (peerd does not create it)", dir)
		}
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if err := syscall.Access(dir, 2|1 /* W_OK|X_OK */); err != nil {
		return fmt.Errorf("directory %s cannot be written: %v", dir, err)
	}
	return nil
}

// checkStoreDir: the disk store's directory is a writable directory, or
// does not exist yet in a writable directory (start-up makes it, mode
// 0750, and says so; never its parents).
func checkStoreDir(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return writableDir(filepath.Dir(dir))
	case err != nil:
		return err
	case !st.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	return writableDir(dir)
}

// FileKind names a mode's file type.
func FileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}
