package cache

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The disk store reads bytes back from files a crash, a power loss or a
// bad disk may have changed: an object file and the journal's records.
// Whatever they hold, reading them never panics, and what checks out is
// exactly what was written.

// FuzzObjectFile: any file content is either refused or read back as
// the head and body encodeHead and the writer made; a head that decodes
// encodes to the same bytes.
func FuzzObjectFile(f *testing.F) {
	dir := f.TempDir()
	c := diskCache(f, dir, nil)
	storeOn(f, c, "http://example.com/fuzz", body(70<<10, 1), 70<<10)
	storeOn(f, c, "http://example.com/empty", nil, 0)
	filepath.WalkDir(filepath.Join(dir, "objects"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := os.ReadFile(p)
			f.Add(b)
			f.Add(b[:len(b)/2])
		}
		return nil
	})
	f.Add([]byte(fileMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "o")
		os.WriteFile(p, b, 0o640)
		fh, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		o, ref, err := readObject(fh)
		if err != nil {
			return
		}
		if ref.bodyLen < 0 || int64(len(ref.crcs)) != blocksOf(ref.bodyLen) {
			t.Fatalf("accepted a body of %d bytes with %d checksums", ref.bodyLen, len(ref.crcs))
		}
		if again, err := decodeHead(encodeHead(o)); err != nil || !bytes.Equal(encodeHead(again), encodeHead(o)) {
			t.Fatalf("a head read back does not encode the same: %v", err)
		}
		if body, err := ref.readBody(fh); err == nil && int64(len(body)) != ref.bodyLen {
			t.Fatalf("body of %d bytes, want %d", len(body), ref.bodyLen)
		}
	})
}

// FuzzJournalRecord: a record is refused unless its checksum holds, and
// one that is accepted encodes back to itself, but for the bytes an
// entry does not keep (the key's second 8 bytes and the variant hash's
// first 4, which records written before the index was made smaller
// hold), and reads back as the same entry.
func FuzzJournalRecord(f *testing.F) {
	e := diskEntry{key: hashKey([]byte("k")), id: 7, sec: 3}
	e.setSize(1000)
	f.Add(appendRecord(nil, opAdd, &e))
	f.Add(appendRecord(nil, opDel, &e))
	f.Add(make([]byte, recordSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		op, got, ok := parseRecord(b)
		if !ok {
			return
		}
		back := appendRecord(nil, op, &got)
		kept := func(r []byte) []byte { return slices.Concat(r[:12], r[20:36], r[40:44]) }
		if !bytes.Equal(kept(back), kept(b)) {
			t.Fatalf("record %x read back as %x", b[:recordSize], back)
		}
		if op2, again, ok := parseRecord(back); !ok || op2 != op || again != got {
			t.Fatalf("record %x: %v %+v, re-encoded and read again: %v %+v %v", b[:recordSize], op, got, op2, again, ok)
		}
	})
}

// FuzzDecodeHead: past the checksums, a head is taken apart without
// trusting a length in it; what decodes encodes to a head that decodes to
// the same object (varints may have been written longer than needed).
func FuzzDecodeHead(f *testing.F) {
	o, _ := testCache(f).build(request(f, "GET", url, "Accept-Language: en"),
		response(f, "200 OK", "Cache-Control: max-age=60", "Vary: Accept-Language", "ETag: \"x\"", "Date: {0}"), t0, t0)
	o.Key = url
	f.Add(encodeHead(o))
	f.Add([]byte{1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := decodeHead(b)
		if err != nil {
			return
		}
		again, err := decodeHead(encodeHead(o))
		if err != nil || !bytes.Equal(encodeHead(again), encodeHead(o)) {
			t.Fatalf("head %x does not survive encoding again: %v", b, err)
		}
	})
}

// FuzzHeadFile: a head file is read back only when it checks out, and
// what is read encodes to the same head; a body length other than the
// one it was written for is refused.
func FuzzHeadFile(f *testing.F) {
	dir := f.TempDir()
	c := diskCache(f, dir, nil)
	storeOn(f, c, "http://example.com/fuzz", body(100, 1), 100)
	o, _, _ := c.Find(request(f, "GET", "http://example.com/fuzz"), t0)
	good := appendHeadFile(nil, encodeHead(o), 100)
	f.Add(good, int64(100))
	f.Add(good[:len(good)-1], int64(100))
	f.Add(good, int64(99))
	f.Add([]byte(headMagic), int64(0))
	f.Fuzz(func(t *testing.T, b []byte, bodyLen int64) {
		p := filepath.Join(t.TempDir(), "h")
		os.WriteFile(p, b, 0o640)
		o, err := readHeadFile(p, bodyLen)
		if err != nil {
			return
		}
		if !bytes.Equal(appendHeadFile(nil, encodeHead(o), bodyLen), b) {
			t.Fatal("a head file read back does not write the same")
		}
	})
}

// FuzzSegment: any segment content, walked record by record as reads
// find them (a header, then the object file it measures), never panics,
// and a record that checks out has its body inside itself.
func FuzzSegment(f *testing.F) {
	dir := f.TempDir()
	c := diskCache(f, dir, nil)
	for i := range 3 {
		storeOn(f, c, smallURL(i), body(1000*i, byte(i)), int64(1000*i))
	}
	c.Close()
	for name := range segmentFiles(f, dir) {
		b, _ := os.ReadFile(filepath.Join(dir, "objects", "segments", name))
		_, end := recordStarts(b)
		f.Add(b[:end])
		f.Add(b[:end/2])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		for off := int64(0); off+segHeader <= int64(len(b)); {
			n, ok := parseSegHeader(b[off:])
			if !ok {
				return
			}
			base := off + segHeader
			if o, ref, err := readObjectAt(r, base, n); err == nil {
				if o == nil || ref.bodyOff < base || ref.bodyOff+ref.bodyLen > base+n || int64(len(ref.crcs)) != blocksOf(ref.bodyLen) {
					t.Fatalf("record at %d accepted with its body at %d+%d, outside %d+%d", off, ref.bodyOff, ref.bodyLen, base, n)
				}
				if body, err := ref.readBody(r); err == nil && int64(len(body)) != ref.bodyLen {
					t.Fatalf("body of %d bytes, want %d", len(body), ref.bodyLen)
				}
			}
			off = base + n
		}
	})
}
