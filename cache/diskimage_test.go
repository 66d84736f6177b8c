package cache

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/peerd/peerd/internal/conf"
)

// imageCache opens a cache on dir as diskCache does, with its log kept:
// where the index came from ("image" or "journal") and the warnings.
func imageCache(t testing.TB, dir string, size int64) (*Cache, string, []string) {
	t.Helper()
	log, hook := logtest.NewNullLogger()
	cfg := DefaultConfig()
	cfg.Disk, cfg.DiskSize, cfg.MaxObject = dir, conf.ByteSize(size), 32<<20
	c, err := Open(cfg, Options{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	<-c.disk.ready
	from := ""
	var warns []string
	for _, e := range hook.AllEntries() {
		if e.Message == "cache disk: index loaded" {
			from, _ = e.Data["from"].(string)
		}
		if e.Level <= logrus.WarnLevel {
			warns = append(warns, e.Message)
		}
	}
	return c, from, warns
}

// imageStore fills dir with objects of every kind the index holds: in
// files and in segments, variants of one key, free slots left by
// evictions and a purge, a refreshed head, a CLOCK bit set. It returns
// the URLs still stored, with their bodies.
func imageStore(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	c, _, _ := imageCache(t, dir, 2<<20)
	want := map[string][]byte{}
	for i := range 60 {
		n := 3000 + i*10
		if i%5 == 0 {
			n = 100 << 10 // a file of its own
		}
		u := fmt.Sprintf("http://example.com/img/%d", i)
		storeOn(t, c, u, body(n, byte(i)), int64(n))
		want[u] = body(n, byte(i))
	}
	for _, lang := range []string{"en", "fr", "de"} {
		r := request(t, "GET", varURL, "Accept-Language: "+lang)
		w := c.Admit(r, response(t, "200 OK", "Cache-Control: max-age=3600", "Vary: Accept-Language", "Date: {0}"), 5000, t0, t0, nil)
		w.Write(body(5000, 9))
		w.Finish(true)
		c.disk.writers.Wait()
	}
	c.Purge(request(t, "GET", "http://example.com/img/7").Key)
	delete(want, "http://example.com/img/7")
	served(t, c, "http://example.com/img/58") // its CLOCK bit
	// What the store evicted to stay within 2 MiB is no longer wanted.
	for u := range want {
		if len(c.disk.lookup(hashKey(request(t, "GET", u).Key))) == 0 {
			delete(want, u)
		}
	}
	if c.disk.ix.free == 0 || len(want) < 20 || len(c.disk.segs) == 0 || varCount(c) != 3 {
		t.Fatalf("the store lacks a kind: free list %d, %d objects, %d segments, %d variants", c.disk.ix.free, len(want), len(c.disk.segs), varCount(c))
	}
	c.Close()
	if _, err := os.Stat(filepath.Join(dir, imageName)); err != nil {
		t.Fatalf("no image after a clean close: %v", err)
	}
	return want
}

const varURL = "http://example.com/img/var"

// varCount is how many variants of varURL the disk holds.
func varCount(c *Cache) int {
	c.disk.mu.Lock()
	defer c.disk.mu.Unlock()
	return c.disk.chainLen(hashKey([]byte(varURL)))
}

// servesAll checks that every URL of want is a hit on its bytes in c.
func servesAll(t *testing.T, c *Cache, want map[string][]byte, when string) {
	t.Helper()
	for u, b := range want {
		if v, _, got := served(t, c, u); v != Hit || !bytes.Equal(got, b) {
			t.Fatalf("%s %s: %v, %d bytes", u, when, v, len(got))
		}
	}
}

// journalRead opens the store in dir, checks that its index came from the
// journal after a warning about the image, and that it serves want.
func journalRead(t *testing.T, dir string, want map[string][]byte) {
	t.Helper()
	c, from, warns := imageCache(t, dir, 2<<20)
	if from != "journal" || len(warns) == 0 {
		t.Fatalf("the index came from %q with warnings %q; want the journal, and a warning", from, warns)
	}
	servesAll(t, c, want, "after the journal")
}

// storeState is what a restart must give back: figures and the index.
func storeState(c *Cache) string {
	d := c.disk
	d.mu.Lock()
	defer d.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "objects %d bytes %d dead %d records %d\n", d.objects, d.bytes, d.dead, d.records)
	for no, s := range d.segs {
		fmt.Fprintf(&b, "segment %d: live %d count %d alloc %d\n", no, s.live, s.count, s.alloc)
	}
	return b.String()
}

// A clean stop leaves an image of the index, and the next start reads
// it instead of the journal: the same objects, figures and CLOCK state,
// every object served; the journal read instead gives the same objects.
func TestDiskImageRestart(t *testing.T) {
	dir := t.TempDir()
	want := imageStore(t, dir)
	c, from, warns := imageCache(t, dir, 2<<20)
	if from != "image" || len(warns) != 0 {
		t.Fatalf("the index came from %q, warnings %q; want the image and none", from, warns)
	}
	if _, err := os.Stat(filepath.Join(dir, imageName)); !os.IsNotExist(err) {
		t.Fatalf("the image is still there once read: %v", err)
	}
	k := hashKey(request(t, "GET", "http://example.com/img/58").Key)
	if es := c.disk.lookup(k); len(es) != 1 || !c.disk.ix.ref(c.disk.ix.first(k)) {
		t.Fatal("the CLOCK bit of a hit object was not kept")
	}
	if varCount(c) != 3 {
		t.Fatalf("%d variants after the image, want 3", varCount(c))
	}
	fromImage := storeState(c)
	servesAll(t, c, want, "after the image")
	if s := c.Stats(); s.DiskObjects != int64(len(want)+3) || s.DiskErrors != 0 {
		t.Fatalf("after the image: %d objects, %d errors; want %d, 0", s.DiskObjects, s.DiskErrors, len(want)+3)
	}
	c.Close()
	os.Remove(filepath.Join(dir, imageName))
	c, from, _ = imageCache(t, dir, 2<<20)
	if from != "journal" {
		t.Fatalf("with no image the index came from %q", from)
	}
	// (records differ: serving promoted objects to memory, which the
	// journal does not see, but nothing more)
	if got := storeState(c); got != fromImage {
		t.Fatalf("the journal gives\n%s\nthe image gave\n%s", got, fromImage)
	}
	servesAll(t, c, want, "after the journal")
}

// A store that never held an object restarts from its image too, with
// no warning.
func TestDiskImageEmptyStore(t *testing.T) {
	dir := t.TempDir()
	c, _, _ := imageCache(t, dir, 2<<20)
	c.Close()
	c, from, warns := imageCache(t, dir, 2<<20)
	if from != "image" || len(warns) != 0 {
		t.Fatalf("the index came from %q, warnings %q; want the image and none", from, warns)
	}
	storeOn(t, c, "http://example.com/first", body(100, 1), 100)
	if s := c.Stats(); s.DiskObjects != 1 {
		t.Fatalf("%d objects after storing one", s.DiskObjects)
	}
}

// An image that is not the journal's (a record added after it, a record
// changed in place, the image cut or a byte of it changed) is not used:
// the journal is read, and what it says stands.
func TestDiskImageMismatchReadsTheJournal(t *testing.T) {
	cases := []struct {
		name string
		edit func(t *testing.T, dir string)
	}{
		{"record added", func(t *testing.T, dir string) {
			e := diskEntry{key: hashKey(request(t, "GET", "http://example.com/img/5").Key), id: 1}
			f, err := os.OpenFile(filepath.Join(dir, "journal"), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			// A del for an id not stored: nothing changes but the length.
			f.Write(appendRecord(nil, opDel, &e))
		}},
		{"record changed", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "journal")
			b, _ := os.ReadFile(p)
			last := b[len(b)-recordSize:]
			copy(last, appendRecord(nil, opDel, &diskEntry{id: 12345}))
			os.WriteFile(p, b, 0o640)
		}},
		{"image cut", func(t *testing.T, dir string) {
			p := filepath.Join(dir, imageName)
			st, _ := os.Stat(p)
			os.Truncate(p, st.Size()-1)
		}},
		{"image byte changed", func(t *testing.T, dir string) {
			p := filepath.Join(dir, imageName)
			b, _ := os.ReadFile(p)
			b[len(b)-100] ^= 1
			os.WriteFile(p, b, 0o640)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			want := imageStore(t, dir)
			tc.edit(t, dir)
			journalRead(t, dir, want)
		})
	}
}

// resealImage puts right the checksums of an image whose bytes were
// changed, so that its checks of structure are what refuses it.
func resealImage(b []byte) []byte {
	h, hlen, err := readImageHeader(bytes.NewReader(b))
	if err != nil {
		// A header whose figures parse but whose checksum fails.
		fixed := len(imageMagic) + 13*8
		if len(b) < fixed || string(b[:len(imageMagic)]) != imageMagic {
			return b
		}
		nsegs := binary.LittleEndian.Uint64(b[len(imageMagic)+11*8:])
		ncrcs := binary.LittleEndian.Uint64(b[len(imageMagic)+12*8:])
		if nsegs > 1<<20 || ncrcs > 1<<24 || imageHeaderLen(nsegs, ncrcs) > int64(len(b)) {
			return b
		}
		n := imageHeaderLen(nsegs, ncrcs)
		binary.LittleEndian.PutUint64(b[n-8:], uint64(crc32.Checksum(b[:n-8], castagnoli)))
		if h, hlen, err = readImageHeader(bytes.NewReader(b)); err != nil {
			return b
		}
	}
	if h.tab > 1<<31 || h.used > maxSlots {
		return append(h.marshal(), b[hlen:]...) // refused by its figures
	}
	off := imageBodyAt(hlen)
	var lens []int64
	for i := uint64(0); i < h.tab; i += tablePiece {
		lens = append(lens, int64(min(tablePiece, h.tab-i))*4)
	}
	for range (h.used + chunkLen - 1) / chunkLen {
		lens = append(lens, chunkPieceBytes)
	}
	for i, n := range lens {
		if i >= len(h.crcs) || off+n > int64(len(b)) {
			return b
		}
		h.crcs[i] = crc32.Checksum(b[off:off+n], castagnoli)
		off += n
	}
	return append(h.marshal(), b[hlen:]...)
}

// editImage changes the image in dir with edit (given the index it
// holds, as read) and puts its checksums right.
func editImage(t *testing.T, dir string, edit func(b []byte, x *diskIndex, hlen int)) {
	p := filepath.Join(dir, imageName)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	h, hlen, err := readImageHeader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	x := &diskIndex{used: int(h.used), free: slot(h.free)}
	at := imageBodyAt(hlen)
	x.table = slotsOf(b[at : at+int64(h.tab)*4])
	body := b[at+int64(h.tab)*4:]
	for c := range (h.used + chunkLen - 1) / chunkLen {
		x.chunks = append(x.chunks, entriesOf(body[int64(c)*chunkPieceBytes+imagePage:]))
	}
	edit(b, x, int(hlen))
	os.WriteFile(p, resealImage(b), 0o640)
}

// An image whose checksums hold but whose structure does not is refused
// before it is used: a table naming a free entry, a chain of variants
// that loops, a free list lost, an object counted in no segment's figures, a slot past the slab.
func TestDiskImageChecksStructure(t *testing.T) {
	cases := []struct {
		name string
		edit func(b []byte, x *diskIndex, hlen int)
	}{
		{"table names a free entry", func(b []byte, x *diskIndex, _ int) {
			for i, v := range x.table {
				if v != 0 {
					x.table[i] = x.free | v&^slotMask
					return
				}
			}
		}},
		{"a chain loops", func(b []byte, x *diskIndex, _ int) {
			s := x.table[0] & slotMask
			for i := 0; s == 0; i++ {
				s = x.table[i] & slotMask
			}
			x.at(s).sib = s
		}},
		{"free list lost", func(b []byte, x *diskIndex, _ int) { binary.LittleEndian.PutUint64(b[len(imageMagic)+6*8:], 0) }},
		{"slot past the slab", func(b []byte, x *diskIndex, _ int) {
			for i := 1; i <= x.used; i++ {
				if e := x.at(slot(i)); e.id != 0 {
					e.sib = slot(x.used + 1)
					return
				}
			}
		}},
		{"free list loops", func(b []byte, x *diskIndex, _ int) { x.at(x.free).sib = x.free }},
		{"an object moved into a segment", func(b []byte, x *diskIndex, _ int) {
			var seg, file *diskEntry
			for i := 1; i <= x.used; i++ {
				switch e := x.at(slot(i)); {
				case e.id == 0:
				case isSeg(e.id):
					seg = e
				default:
					file = e
				}
			}
			file.id = segID(segNo(seg.id), 1<<20)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			want := imageStore(t, dir)
			editImage(t, dir, tc.edit)
			journalRead(t, dir, want)
		})
	}
}

// The image's chunks are used where they lie in its file, and then
// copied into the process's own memory: once that is done, no mapping of
// the image is left (its disk space is free), and what was written to
// the index meanwhile, and after, is served.
func TestDiskImageLetGoOnceCopied(t *testing.T) {
	dir := t.TempDir()
	want := imageStore(t, dir)
	c, from, _ := imageCache(t, dir, 64<<20) // (nothing evicted)
	if from != "image" {
		t.Fatalf("the index came from %q; want the image", from)
	}
	storeOn(t, c, "http://example.com/meanwhile", body(4000, 3), 4000)
	want["http://example.com/meanwhile"] = body(4000, 3)
	c.disk.owning.Wait()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip("no /proc/self/maps here")
	}
	if p := filepath.Join(dir, imageName); bytes.Contains(maps, []byte(p)) {
		t.Fatalf("%s is still mapped once its chunks were copied", p)
	}
	c.Purge(request(t, "GET", "http://example.com/img/58").Key)
	delete(want, "http://example.com/img/58")
	servesAll(t, c, want, "after the copy")
	c.Close()
	c, from, _ = imageCache(t, dir, 64<<20)
	if from != "image" {
		t.Fatalf("the second restart's index came from %q; want the image", from)
	}
	servesAll(t, c, want, "after a second restart")
}

// What is stored while the image is read is newer than anything in it:
// it replaces the image's entry of the same variant, and a purge made
// meanwhile takes the image's entries of its key.
func TestDiskImageMergesWhatCameMeanwhile(t *testing.T) {
	src := t.TempDir()
	c, _, _ := imageCache(t, src, 64<<20)
	for _, u := range []string{"a", "b", "c"} {
		storeOn(t, c, "http://example.com/"+u, body(100<<10, 1), 100<<10) // files: no segment
	}
	c.Close()
	img, err := os.Open(filepath.Join(src, imageName))
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	h, hlen, err := readImageHeader(img)
	if err != nil {
		t.Fatal(err)
	}

	c, _, _ = imageCache(t, t.TempDir(), 64<<20)
	storeOn(t, c, "http://example.com/a", body(100<<10, 2), 100<<10)
	storeOn(t, c, "http://example.com/d", body(100<<10, 2), 100<<10)
	d := c.disk
	newA := d.lookup(hashKey(request(t, "GET", "http://example.com/a").Key))[0].id
	d.mu.Lock()
	d.tomb[hashKey(request(t, "GET", "http://example.com/b").Key)] = struct{}{}
	d.mu.Unlock()
	if err := d.loadImage(img, h, hlen, 0); err != nil {
		t.Fatal(err)
	}
	ids := func(u string) []uint64 {
		var out []uint64
		for _, e := range d.lookup(hashKey(request(t, "GET", u).Key)) {
			out = append(out, e.id)
		}
		return out
	}
	if a := ids("http://example.com/a"); len(a) != 1 || a[0] != newA {
		t.Errorf("a: %v; want only the one stored meanwhile, %d", a, newA)
	}
	if b := ids("http://example.com/b"); len(b) != 0 {
		t.Errorf("b, purged meanwhile: %v", b)
	}
	if len(ids("http://example.com/c")) != 1 || len(ids("http://example.com/d")) != 1 {
		t.Error("c (the image's) or d (stored meanwhile) is missing")
	}
	if s := c.Stats(); s.DiskObjects != 3 || s.DiskBytes != 3*d.lookup(hashKey(request(t, "GET", "http://example.com/d").Key))[0].size() {
		t.Errorf("figures: %d objects, %d bytes", s.DiskObjects, s.DiskBytes)
	}
}

// Views of an image's bytes as the index's types.
func slotsOf(b []byte) []slot { return unsafe.Slice((*slot)(unsafe.Pointer(&b[0])), len(b)/4) }

func entriesOf(b []byte) []diskEntry {
	return unsafe.Slice((*diskEntry)(unsafe.Pointer(&b[0])), chunkLen)
}

// copyTree copies the store in src to dst (files and directories).
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o750)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o640)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// FuzzDiskImage: an image changed anywhere, its checksums put right, is
// refused or used; either way nothing panics or loops, a hit serves the
// very bytes stored under its URL, and the store goes on storing,
// purging and evicting. An edit is 5 bytes: which part (header, table,
// slab), where in it (3 bytes) and what to XOR there.
func FuzzDiskImage(f *testing.F) {
	tmpl := f.TempDir()
	want := imageStore(f, tmpl)
	img, err := os.ReadFile(filepath.Join(tmpl, imageName))
	if err != nil {
		f.Fatal(err)
	}
	os.Remove(filepath.Join(tmpl, imageName))
	h, hlen, err := readImageHeader(bytes.NewReader(img))
	if err != nil {
		f.Fatal(err)
	}
	tableEnd := imageBodyAt(hlen) + int64(h.tab)*4
	parts := [][2]int64{{0, hlen}, {imageBodyAt(hlen), tableEnd}, {tableEnd + imagePage, tableEnd + imagePage + int64(h.used)*int64(entrySize)}}
	f.Add([]byte{})
	f.Add([]byte{2, 0, 0, 40, 1})   // an entry's sib
	f.Add([]byte{1, 0, 0, 2, 0x80}) // a table value's slot
	f.Add([]byte{0, 0, 0, 56, 1})   // the header's free
	f.Add([]byte{2, 0, 1, 0, 0xff}) // an entry's key
	f.Add([]byte{0, 0, 0, 72, 3, 2, 0, 0, 44, 9})
	f.Fuzz(func(t *testing.T, edits []byte) {
		b := bytes.Clone(img)
		for ; len(edits) >= 5; edits = edits[5:] {
			p := parts[int(edits[0])%len(parts)]
			if p[1] <= p[0] {
				continue
			}
			within := (int64(edits[1])<<16 | int64(edits[2])<<8 | int64(edits[3])) % (p[1] - p[0])
			b[p[0]+within] ^= edits[4]
		}
		dir := t.TempDir()
		copyTree(t, tmpl, dir)
		os.WriteFile(filepath.Join(dir, imageName), resealImage(b), 0o640)
		c, _, _ := imageCache(t, dir, 2<<20)
		for u, w := range want {
			if v, _, got := served(t, c, u); v == Hit && !bytes.Equal(got, w) {
				t.Fatalf("%s served %d bytes that are not the ones stored", u, len(got))
			}
		}
		storeOn(t, c, "http://example.com/after", body(4000, 1), 4000)
		c.Purge(request(t, "GET", "http://example.com/img/58").Key)
		c.disk.resize(100 << 10)
		if v, _, got := served(t, c, "http://example.com/after"); v == Hit && !bytes.Equal(got, body(4000, 1)) {
			t.Fatal("the object stored after the load serves other bytes")
		}
		c.Close()
	})
}
