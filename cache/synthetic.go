package cache

// This file holds the making of a synthetic disk store: a journal that
// names objects with no files behind them, so that the bench can time
// loading an index of a million objects it could not fill over HTTP.

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteSyntheticIndex writes a disk store in dir (made if need be) whose
// journal names n objects of size bytes, with no files behind them. Each
// one is a miss when asked for (its file is missing, so it is dropped).
func WriteSyntheticIndex(dir string, n int, size int64) error {
	if size < 0 || size > maxEntrySize {
		return fmt.Errorf("an object of %d bytes: an entry names 0 to %d", size, int64(maxEntrySize))
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	b := make([]byte, 0, len(journalHdr)+n*recordSize)
	b = append(b, journalHdr...)
	for i := range n {
		e := diskEntry{key: hashKey(fmt.Appendf(nil, "http://synthetic.test/%d", i)), id: uint64(i + 1)}
		e.setSize(size)
		b = appendRecord(b, opAdd, &e)
	}
	return os.WriteFile(filepath.Join(dir, "journal"), b, 0o640)
}
