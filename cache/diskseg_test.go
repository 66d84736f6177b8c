package cache

// Tests of the segments small objects are stored in (diskseg.go,
// diskappend.go): they share a few files, survive restarts, are never
// served torn, give their space back a segment at a time, and a store
// whose small objects have files of their own (the layout before
// segments) is read as it is.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/peerd/peerd/internal/conf"
)

// segmentFiles are the store's segment files and their sizes.
func segmentFiles(t testing.TB, dir string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	names, _ := os.ReadDir(filepath.Join(dir, "objects", "segments"))
	for _, n := range names {
		if st, err := os.Stat(filepath.Join(dir, "objects", "segments", n.Name())); err == nil {
			out[n.Name()] = st.Size()
		}
	}
	return out
}

// ownFiles are the object files that are not segments.
func ownFiles(t testing.TB, dir string) int {
	t.Helper()
	n := 0
	for name := range objectFiles(t, dir) {
		if _, seg := segmentFiles(t, dir)[name]; !seg {
			n++
		}
	}
	return n
}

// recordStarts are the offsets of a segment's records, by their headers
// (up to one that does not check: the preallocated rest), and where the
// last one ends.
func recordStarts(seg []byte) (starts []int, end int) {
	for end+segHeader <= len(seg) && crcOf(seg[end:end+4]) == binary.BigEndian.Uint32(seg[end+4:]) {
		starts = append(starts, end)
		end += segHeader + int(binary.BigEndian.Uint32(seg[end:]))
	}
	return starts, end
}

func smallURL(i int) string { return fmt.Sprintf("http://example.com/small/%d", i) }

// TestSmallObjectsShareASegment: forty small objects take one segment
// file and no file each, a large one its own file; all are hits after a
// restart, read from memory or from disk.
func TestSmallObjectsShareASegment(t *testing.T) {
	for _, inMemory := range []conf.ByteSize{512 << 10, 1} {
		t.Run(fmt.Sprintf("max_object_in_memory=%d", inMemory), func(t *testing.T) {
			dir := t.TempDir()
			mut := func(c *Config) { c.MaxObjectInMemory = inMemory }
			c := diskCache(t, dir, mut)
			for i := range 40 {
				storeOn(t, c, smallURL(i), body(3000+i, byte(i)), int64(3000+i))
			}
			large := body(200<<10, 9)
			storeOn(t, c, "http://example.com/large", large, int64(len(large)))
			if segs, own := segmentFiles(t, dir), ownFiles(t, dir); len(segs) != 1 || own != 1 {
				t.Fatalf("%d segment files and %d object files; want 1 and 1 (the large object's)", len(segs), own)
			}
			c.Close()
			c = diskCache(t, dir, mut)
			for i := range 40 {
				if v, _, got := served(t, c, smallURL(i)); v != Hit || !bytes.Equal(got, body(3000+i, byte(i))) {
					t.Fatalf("object %d after the restart: %v, %d bytes", i, v, len(got))
				}
			}
			if v, _, got := served(t, c, "http://example.com/large"); v != Hit || !bytes.Equal(got, large) {
				t.Fatalf("the large object after the restart: %v, %d bytes", v, len(got))
			}
			if s := c.Stats(); s.DiskObjects != 41 || s.DiskErrors != 0 {
				t.Fatalf("%d objects on disk, %d errors; want 41 and 0", s.DiskObjects, s.DiskErrors)
			}
		})
	}
}

// TestSegmentRecordTornNeverServed: the segment cut at every byte of its
// last record (a crash, a power loss) leaves the objects before it
// whole and that one never served; a changed byte in a record's body
// drops that object alone.
func TestSegmentRecordTornNeverServed(t *testing.T) {
	dir := t.TempDir()
	fromDisk := func(c *Config) { c.MaxObjectInMemory = 1 } // every hit reads the segment
	c := diskCache(t, dir, fromDisk)
	bodies := [][]byte{body(2000, 1), body(2500, 2), body(3000, 3)}
	for i, b := range bodies {
		storeOn(t, c, smallURL(i), b, int64(len(b)))
	}
	c.Close()
	var seg string
	for name := range segmentFiles(t, dir) {
		seg = filepath.Join(dir, "objects", "segments", name)
	}
	whole, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	journal, _ := os.ReadFile(filepath.Join(dir, "journal"))
	starts, end := recordStarts(whole)
	if len(starts) != 3 {
		t.Fatalf("%d records in the segment; want 3", len(starts))
	}
	for n := starts[2]; n < end; n += 7 {
		os.WriteFile(seg, whole[:n], 0o640)
		os.WriteFile(filepath.Join(dir, "journal"), journal, 0o640)
		c := diskCache(t, dir, fromDisk)
		for i := range 2 {
			if v, _, got := served(t, c, smallURL(i)); v != Hit || !bytes.Equal(got, bodies[i]) {
				t.Fatalf("cut at %d: object %d: %v, %d bytes; want it whole", n, i, v, len(got))
			}
		}
		if v, _, got := served(t, c, smallURL(2)); v == Hit && got != nil {
			t.Fatalf("cut at %d of %d: the torn object served %d bytes", n, len(whole), len(got))
		}
		c.Close()
	}

	// A changed byte in the second record's body.
	bad := bytes.Clone(whole)
	bad[starts[1]+segHeader+prefixSize+600] ^= 0xff // in the head or the body: either fails its checksum
	os.WriteFile(seg, bad, 0o640)
	os.WriteFile(filepath.Join(dir, "journal"), journal, 0o640)
	c = diskCache(t, dir, fromDisk)
	if v, _, got := served(t, c, smallURL(1)); v == Hit && got != nil {
		t.Fatalf("the changed record served %d bytes", len(got))
	}
	for _, i := range []int{0, 2} {
		if v, _, got := served(t, c, smallURL(i)); v != Hit || !bytes.Equal(got, bodies[i]) {
			t.Fatalf("object %d beside the changed one: %v, %d bytes", i, v, len(got))
		}
	}
}

// TestSegmentsGiveSpaceBack: a small disk_size filled many times over
// by small objects stays within disk_size on disk (segments and all),
// with whole segments reclaimed; every hit is the body stored, before
// and after a restart.
func TestSegmentsGiveSpaceBack(t *testing.T) {
	dir := t.TempDir()
	const size = 4 << 20
	mut := func(c *Config) { c.DiskSize, c.MaxObjectInMemory = size, 1 } // every hit read from disk
	c := diskCache(t, dir, mut)
	const n = 4000 // about 12 MiB of objects
	for i := range n {
		storeOn(t, c, smallURL(i), body(3000, byte(i)), 3000)
	}
	onDisk := func() int64 {
		var sum int64
		for _, s := range segmentFiles(t, dir) {
			sum += s
		}
		return sum
	}
	if got := onDisk(); got > size+size/16 {
		t.Fatalf("%d bytes of segments on disk; want at most disk_size (%d) and one segment's slack", got, size)
	}
	if s := c.Stats(); s.DiskBytes > size || s.DiskObjects == 0 {
		t.Fatalf("disk_bytes %d, %d objects; want within %d and some kept", s.DiskBytes, s.DiskObjects, size)
	}
	hits := func(c *Cache) []int {
		var kept []int
		for i := range n {
			v, _, got := served(t, c, smallURL(i))
			if v == Hit && got != nil {
				if !bytes.Equal(got, body(3000, byte(i))) {
					t.Fatalf("object %d served another body", i)
				}
				kept = append(kept, i)
			}
		}
		return kept
	}
	stored := c.Stats().DiskObjects
	if before := hits(c); len(before) < n/8 || int64(len(before)) < stored {
		t.Fatalf("%d of %d objects are hits, %d on disk; want at least an eighth, and every one on disk", len(before), n, stored)
	}
	c.Close()
	c = diskCache(t, dir, mut)
	if after := hits(c); int64(len(after)) != stored {
		t.Fatalf("%d objects on disk before the restart, %d hits after", stored, len(after))
	}
}

// TestOwnFileSmallObjectsStillRead: small objects stored with a file of
// their own (as before segments, or while the index loads) are hits after
// a restart beside those stored in segments since.
func TestOwnFileSmallObjectsStillRead(t *testing.T) {
	dir := t.TempDir()
	c := diskCache(t, dir, nil)
	c.disk.segReady.Store(false) // the layout before segments: a file an object
	for i := range 10 {
		storeOn(t, c, smallURL(i), body(1000, byte(i)), 1000)
	}
	if own := ownFiles(t, dir); own != 10 {
		t.Fatalf("%d object files; want 10", own)
	}
	c.Close()
	c = diskCache(t, dir, nil)
	for i := 10; i < 20; i++ {
		storeOn(t, c, smallURL(i), body(1000, byte(i)), 1000)
	}
	c.Close()
	c = diskCache(t, dir, nil)
	for i := range 20 {
		if v, _, got := served(t, c, smallURL(i)); v != Hit || !bytes.Equal(got, body(1000, byte(i))) {
			t.Fatalf("object %d: %v, %d bytes", i, v, len(got))
		}
	}
	if segs := segmentFiles(t, dir); len(segs) != 1 {
		t.Fatalf("%d segment files; want 1", len(segs))
	}
}

// TestSegmentsNumberedAboveTheJournal: each process writes a segment of
// its own, numbered above every one before, even those reclaimed: a
// record of a segment that is gone never names bytes of a new one.
func TestSegmentsNumberedAboveTheJournal(t *testing.T) {
	dir := t.TempDir()
	c := diskCache(t, dir, nil)
	storeOn(t, c, smallURL(0), body(1000, 0), 1000)
	c.Close()
	// The segment goes (as a reclaim would), its record stays in the
	// journal.
	for name := range segmentFiles(t, dir) {
		os.Remove(filepath.Join(dir, "objects", "segments", name))
	}
	c = diskCache(t, dir, nil)
	storeOn(t, c, smallURL(1), body(1000, 1), 1000)
	c.Close()
	c = diskCache(t, dir, nil)
	if v, _, _ := served(t, c, smallURL(0)); v == Hit {
		t.Fatal("the object of a removed segment is a hit")
	}
	if v, _, got := served(t, c, smallURL(1)); v != Hit || !bytes.Equal(got, body(1000, 1)) {
		t.Fatalf("the object of the new segment: %v, %d bytes", v, len(got))
	}
	if names := segmentFiles(t, dir); len(names) != 1 {
		t.Fatalf("segments %v; want the new one alone", names)
	}
}
