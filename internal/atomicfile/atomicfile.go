// Package atomicfile replaces a file whole: a crash leaves the old file or
// the new one, never a mix. The state file, the pid file and the disk
// cache's journal compaction write through it.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write replaces path with b: written to a temporary file beside it,
// synced, renamed over path, and the directory synced.
func Write(path string, b []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
