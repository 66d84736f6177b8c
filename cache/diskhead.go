package cache

// This file holds the refresh of a stored object's head on disk: a 304
// (RFC 9111 4.3.4) changes the head and never the body, so the new head
// is written to a small head file beside the object file and named in
// the journal by an opHead record, committed as an object is: the file
// first, then its record. The body is not written again, however large.
//
//	"PEERDHD1"            8 bytes
//	body length           8 bytes, big-endian (must be the object file's)
//	head length H         4 bytes
//	head                  H bytes (encodeHead)
//	CRC-32C               4 bytes, of all the above
//
// A crash before the record leaves a head file the journal does not
// name, swept at the next start; the object keeps its older head. A head
// file that does not check out drops the object, as a torn object file
// does.

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io/fs"
	"os"
)

const headMagic = "PEERDHD1"

// appendHeadFile is a head file's bytes.
func appendHeadFile(b []byte, head []byte, bodyLen int64) []byte {
	start := len(b)
	b = append(b, headMagic...)
	b = binary.BigEndian.AppendUint64(b, uint64(bodyLen))
	b = binary.BigEndian.AppendUint32(b, uint32(len(head)))
	b = append(b, head...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// readHeadFile reads and checks a head file: the object its head
// rebuilds, for a body of bodyLen bytes.
func readHeadFile(path string, bodyLen int64) (*Object, error) {
	b, err := readSmallFile(path, maxHead+24)
	if err != nil {
		return nil, err
	}
	if len(b) < 24 || string(b[:8]) != headMagic || crc32.Checksum(b[:len(b)-4], castagnoli) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return nil, errCorrupt
	}
	if int64(binary.BigEndian.Uint64(b[8:])) != bodyLen || int(binary.BigEndian.Uint32(b[16:])) != len(b)-24 {
		return nil, errCorrupt
	}
	return decodeHead(b[20 : len(b)-4])
}

// readSmallFile reads a file of at most max bytes (a longer one does not
// check out), without following a symbolic link.
func readSmallFile(path string, max int64) ([]byte, error) {
	f, err := openNoFollow(path, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > max {
		return nil, errCorrupt
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, readErr(err)
	}
	return b, nil
}

// beginWrite counts a write that close waits for; false when the store
// takes nothing now (paused by a fault, or closing).
func (d *disk) beginWrite() bool {
	if !d.storing() {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closing {
		return false
	}
	d.writers.Add(1)
	return true
}

// refreshHead writes o's head (a 304 merged into the object of entry id)
// as the entry's next head generation and commits it; beginWrite counted
// it. It runs behind the request; an entry replaced or refreshed
// meanwhile keeps what it has, and none is refreshed while the index
// loads (a record yet to be read could not be ordered with it).
func (d *disk) refreshHead(o *Object, key keyHash, sec secHash, id uint64, bodyLen int64) {
	defer d.writers.Done()
	d.mu.Lock()
	x := d.entryLocked(key, sec, id)
	if x == nil || d.loading.Load() {
		d.mu.Unlock()
		return
	}
	old := x.gen()
	gen := old%maxGen + 1
	if d.fresh != nil {
		d.fresh[id] = struct{}{}
	}
	d.mu.Unlock()
	path := d.headPath(id, gen)
	b := appendHeadFile(nil, encodeHead(o), bodyLen)
	if err := d.writeNew(path, b); err != nil {
		os.Remove(path)
		d.fault("write", err)
		return
	}
	d.mu.Lock()
	x = d.entryLocked(key, sec, id)
	if x == nil || x.gen() != old || d.closed {
		d.mu.Unlock()
		os.Remove(path) // replaced, purged or refreshed by another meanwhile
		return
	}
	size := x.size() - d.headFileSize(x) + int64(len(b))
	if size > maxEntrySize {
		d.mu.Unlock()
		os.Remove(path)
		return
	}
	n := diskEntry{key: key, sec: sec, id: id}
	n.setGen(gen)
	n.setSize(size)
	rec := appendRecord(nil, opHead, &n)
	if err := d.appendLocked(rec); err != nil {
		d.mu.Unlock()
		os.Remove(path)
		d.fault("journal", err)
		return
	}
	d.bytes += size - x.size()
	x.sg = n.sg
	victims := d.evictLocked()
	d.mu.Unlock()
	if old > 0 {
		os.Remove(d.headPath(id, old))
	}
	d.forget(victims)
	d.maybeCompact()
}

// headFileSize is the size of x's head file now (0 for none).
func (d *disk) headFileSize(x *diskEntry) int64 {
	if x.gen() == 0 {
		return 0
	}
	if st, err := os.Lstat(d.headPath(x.id, x.gen())); err == nil {
		return st.Size()
	}
	return 0
}

// entryLocked finds the entry of key's variant sec with id (nil: none).
func (d *disk) entryLocked(key keyHash, sec secHash, id uint64) *diskEntry {
	if s := d.slotLocked(key, sec, id); s != 0 {
		return d.ix.at(s)
	}
	return nil
}

// slotLocked is the slot of key's variant sec with id (0: none).
func (d *disk) slotLocked(key keyHash, sec secHash, id uint64) slot {
	for s := d.ix.first(key); s != 0; s = d.ix.at(s).sib {
		if x := d.ix.at(s); x.sec == sec && x.id == id {
			return s
		}
	}
	return 0
}

// writeNew writes a new file whole (synced with disk_fsync), making its
// directory when it is missing.
func (d *disk) writeNew(path string, b []byte) error {
	f, err := createNoFollow(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err = d.objectDir(path); err == nil {
			f, err = createNoFollow(path)
		}
	}
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil && d.fsync.Load() {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// headLocked applies an opHead record read from the journal: the entry
// it names takes its head generation and size, unless it was stored
// anew since the start.
func (d *disk) headLocked(e *diskEntry) {
	s := d.slotLocked(e.key, e.sec, e.id)
	if s == 0 {
		return
	}
	if _, ok := d.newer[s]; ok {
		return
	}
	x := d.ix.at(s)
	d.bytes += e.size() - x.size()
	x.sg = e.sg
}
