package cache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/peerd/peerd/internal/conf"
	"github.com/peerd/peerd/internal/procs"
	"github.com/sirupsen/logrus"
)

// diskCache opens a cache with a disk store in dir and waits for its
// index.
func diskCache(t testing.TB, dir string, mut func(*Config)) *Cache {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Disk, cfg.DiskSize, cfg.MaxObject = dir, 64<<20, 32<<20
	if mut != nil {
		mut(&cfg)
	}
	c, err := Open(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	<-c.disk.ready
	return c
}

// body makes n recognizable bytes.
func body(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i%251)
	}
	return b
}

// storeOn stores body for u as a fresh response and waits until the disk
// has it. length -1 stores it as a body of unknown length.
func storeOn(t testing.TB, c *Cache, u string, b []byte, length int64) {
	t.Helper()
	r := request(t, "GET", u)
	w := c.Admit(r, response(t, "200 OK", "Cache-Control: max-age=3600", "Date: {0}", "ETag: \"v1\""), length, t0, t0, nil)
	if w == nil {
		t.Fatalf("%s: not admitted", u)
	}
	for p := b; len(p) > 0; {
		k := min(len(p), 10000)
		w.Write(p[:k])
		p = p[k:]
	}
	w.Finish(true)
	c.disk.writers.Wait()
}

// served reads what a hit for u serves: the verdict, whether it came
// from disk, and the body (nil when the body could not be served).
func served(t testing.TB, c *Cache, u string) (Verdict, bool, []byte) {
	t.Helper()
	return servedAt(t, c, u, t0)
}

// servedAt is served at now.
func servedAt(t testing.TB, c *Cache, u string, now time.Time) (Verdict, bool, []byte) {
	t.Helper()
	o, v, fromDisk := c.Find(request(t, "GET", u), now)
	if o == nil {
		return v, false, nil
	}
	if !o.OnDisk() {
		return v, fromDisk, o.Body
	}
	br, err := o.OpenBody()
	if err != nil {
		return Miss, fromDisk, nil
	}
	defer br.Close()
	var buf bytes.Buffer
	if _, err := br.WriteRange(&buf, 0, o.Length()-1); err != nil {
		return v, fromDisk, nil
	}
	return v, fromDisk, buf.Bytes()
}

// Every object stored whole before a stop is a hit after the restart,
// small ones promoted to memory, large ones read from disk (with
// disk_fsync as without).
func TestDiskSurvivesReopen(t *testing.T) {
	for _, fsync := range []bool{false, true} {
		t.Run(fmt.Sprintf("fsync=%v", fsync), func(t *testing.T) { testDiskSurvivesReopen(t, fsync) })
	}
}

func testDiskSurvivesReopen(t *testing.T, fsync bool) {
	dir := t.TempDir()
	c := diskCache(t, dir, func(c *Config) { c.DiskFsync = fsync })
	sizes := []int{0, 1, 1000, blockSize - 1, blockSize, blockSize + 1, 300 << 10, 600 << 10, 2 << 20}
	for i, n := range sizes {
		storeOn(t, c, fmt.Sprintf("http://example.com/o%d", i), body(n, byte(i)), int64(n))
	}
	storeOn(t, c, "http://example.com/unknown-big", body(1<<20, 7), -1)
	storeOn(t, c, "http://example.com/unknown-small", body(3000, 8), -1)
	c.Close()

	c = diskCache(t, dir, nil)
	if s := c.Stats(); s.DiskObjects != int64(len(sizes)+2) || s.IndexLoading || s.IndexObjectsLoaded != s.DiskObjects {
		t.Fatalf("after reopening: %+v", s)
	}
	check := func(u string, want []byte) {
		t.Helper()
		v, fromDisk, got := served(t, c, u)
		if v != Hit || !fromDisk || !bytes.Equal(got, want) {
			t.Fatalf("%s: verdict %v from disk %v, %d bytes (want a disk hit of %d)", u, v, fromDisk, len(got), len(want))
		}
	}
	for i, n := range sizes {
		check(fmt.Sprintf("http://example.com/o%d", i), body(n, byte(i)))
	}
	check("http://example.com/unknown-big", body(1<<20, 7))
	check("http://example.com/unknown-small", body(3000, 8))
	// A small object was promoted: its next hit is from memory.
	if _, fromDisk, got := served(t, c, "http://example.com/o2"); fromDisk || len(got) != 1000 {
		t.Fatalf("promoted object: from disk %v, %d bytes", fromDisk, len(got))
	}
	if s := c.Stats(); s.DiskErrors != 0 {
		t.Fatalf("disk errors: %d", s.DiskErrors)
	}
}

// A file cut at any write point, or with a byte changed, is never served:
// it is a miss (and dropped), or fails before the bad block is written.
func TestDiskTornNeverServed(t *testing.T) {
	dir := t.TempDir()
	small := func(c *Config) { c.MaxObjectInMemory = 1 << 10 } // read from disk, block by block
	c := diskCache(t, dir, small)
	want := body(3*blockSize+100, 3)
	const u = "http://example.com/torn"
	storeOn(t, c, u, want, int64(len(want)))
	c.Close()
	var path string
	filepath.WalkDir(filepath.Join(dir, "objects"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			path = p
		}
		return nil
	})
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	journal, _ := os.ReadFile(filepath.Join(dir, "journal"))
	hl := int(whole[11]) | int(whole[10])<<8
	bodyAt := 12 + hl
	points := []int{0, 1, 8, 12, bodyAt - 1, bodyAt, bodyAt + 1}
	for i := 1; i <= 3; i++ {
		points = append(points, bodyAt+i*blockSize-1, bodyAt+i*blockSize)
	}
	for k := bodyAt + len(want) - 1; k < len(whole); k++ {
		points = append(points, k) // every byte of the checksums and tail
	}
	for _, n := range points {
		if err := os.WriteFile(path, whole[:n], 0o640); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "journal"), journal, 0o640)
		c := diskCache(t, dir, small)
		if v, _, got := served(t, c, u); v == Hit && got != nil {
			t.Fatalf("cut at %d of %d: served %d bytes", n, len(whole), len(got))
		}
		if s := c.Stats(); s.DiskObjects != 0 || s.DiskErrors == 0 {
			t.Fatalf("cut at %d: the torn object is still indexed (%+v)", n, s)
		}
		c.Close()
	}

	// A changed byte in the third block: the first two are served, the
	// third is not written, and the object is dropped.
	bad := bytes.Clone(whole)
	bad[bodyAt+2*blockSize+5] ^= 0xff
	os.WriteFile(path, bad, 0o640)
	os.WriteFile(filepath.Join(dir, "journal"), journal, 0o640)
	c = diskCache(t, dir, small)
	o, v, _ := c.Find(request(t, "GET", u), t0)
	if v != Hit || !o.OnDisk() {
		t.Fatalf("the object with a bad block is not found (%v)", v)
	}
	br, err := o.OpenBody()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	_, err = br.WriteRange(&buf, 0, o.Length()-1)
	br.Close()
	if !errors.Is(err, ErrStoredBroken) || buf.Len() != 2*blockSize || !bytes.Equal(buf.Bytes(), want[:2*blockSize]) {
		t.Fatalf("bad block: %v after %d bytes", err, buf.Len())
	}
	if v, _, _ := served(t, c, u); v != Miss {
		t.Fatalf("after the bad block: %v, want a miss", v)
	}
	c.Close()

	// The journal cut at every byte of its last record: the object is
	// whole or absent.
	for n := len(journal) - recordSize; n <= len(journal); n++ {
		os.WriteFile(path, whole, 0o640) // (a file the journal lacks is swept)
		os.WriteFile(filepath.Join(dir, "journal"), journal[:n], 0o640)
		c := diskCache(t, dir, small)
		v, _, got := served(t, c, u)
		switch {
		case n == len(journal) && (v != Hit || !bytes.Equal(got, want)):
			t.Fatalf("whole journal: %v, %d bytes", v, len(got))
		case n < len(journal) && v != Miss:
			t.Fatalf("journal cut at %d: %v", n, v)
		}
		c.Close()
	}
}

// A disk that fails stops the store (counted), never the response: it is
// relayed and kept in memory; the store takes objects again later.
func TestDiskFaultPausesStore(t *testing.T) {
	dir := t.TempDir()
	c := diskCache(t, dir, nil)
	tmp := filepath.Join(dir, "objects")
	os.RemoveAll(tmp)
	os.WriteFile(tmp, nil, 0o640) // every new file fails (ENOTDIR)
	storeOn(t, c, "http://example.com/f1", body(5000, 1), 5000)
	if v, fromDisk, got := served(t, c, "http://example.com/f1"); v != Hit || fromDisk || len(got) != 5000 {
		t.Fatalf("memory copy: %v %v %d", v, fromDisk, len(got))
	}
	s := c.Stats()
	if s.DiskErrors == 0 || s.DiskObjects != 0 || c.disk.storing() {
		t.Fatalf("after a write fault: %+v, storing %v", s, c.disk.storing())
	}
	// Paused: no further attempt (and no further error) until it retries.
	storeOn(t, c, "http://example.com/f2", body(5000, 2), 5000)
	if c.Stats().DiskErrors != s.DiskErrors {
		t.Fatal("a paused store still tried to write")
	}
	os.Remove(tmp)
	os.Mkdir(tmp, 0o750)
	c.disk.pausedUntil.Store(1) // the pause is over
	storeOn(t, c, "http://example.com/f3", body(5000, 3), 5000)
	if s := c.Stats(); s.DiskObjects != 1 {
		t.Fatalf("after the pause: %+v", s)
	}
}

// Two processes never share a store.
func TestDiskLocked(t *testing.T) {
	dir := t.TempDir()
	diskCache(t, dir, nil)
	cfg := DefaultConfig()
	cfg.Disk = dir
	_, err := Open(cfg, Options{})
	if err == nil || !strings.Contains(err.Error(), "in use by another peerd") || !strings.Contains(err.Error(), fmt.Sprint(os.Getpid())) {
		t.Fatalf("second open: %v", err)
	}
}

// disk_size holds, through a restart and a shrink; the objects hit again
// stay.
func TestDiskEviction(t *testing.T) {
	dir := t.TempDir()
	sized := func(c *Config) { c.DiskSize, c.MaxObject, c.MaxObjectInMemory = 2<<20, 1<<20, 1<<10 }
	c := diskCache(t, dir, sized)
	storeOn(t, c, "http://example.com/hot", body(100<<10, 9), 100<<10)
	for i := range 40 {
		storeOn(t, c, fmt.Sprintf("http://example.com/e%d", i), body(100<<10, byte(i)), 100<<10)
		if v, _, _ := served(t, c, "http://example.com/hot"); v != Hit {
			t.Fatalf("the hot object was evicted after %d others", i)
		}
	}
	if s := c.Stats(); s.DiskBytes > 2<<20 || s.DiskObjects < 10 {
		t.Fatalf("disk_size 2 MiB: %+v", s)
	}
	c.Close()
	c = diskCache(t, dir, func(c *Config) { sized(c); c.DiskSize = 1 << 20 })
	if s := c.Stats(); s.DiskBytes > 1<<20 || s.DiskObjects == 0 {
		t.Fatalf("shrunk to 1 MiB at the restart: %+v", s)
	}
	c = c.Reconfigured(func() Config { cfg := DefaultConfig(); sized(&cfg); cfg.Disk, cfg.DiskSize = dir, 300<<10; return cfg }())
	if s := c.Stats(); s.DiskBytes > 300<<10 {
		t.Fatalf("shrunk by a reload: %+v", s)
	}
}

// A purge reaches the disk, and holds across a restart, also for a purge
// while the index was still loading.
func TestDiskPurge(t *testing.T) {
	dir := t.TempDir()
	c := diskCache(t, dir, nil)
	storeOn(t, c, "http://example.com/p1", body(100, 1), 100)
	storeOn(t, c, "http://example.com/p2", body(100, 2), 100)
	if n := c.Purge(request(t, "GET", "http://example.com/p1").Key); n != 1 {
		t.Fatalf("purged %d", n)
	}
	c.Close()
	c = diskCache(t, dir, nil)
	if v, _, _ := served(t, c, "http://example.com/p1"); v != Miss {
		t.Fatalf("purged object after a restart: %v", v)
	}
	// A purge that comes before the index has loaded the key.
	c.disk.mu.Lock()
	c.disk.loading.Store(true)
	c.disk.mu.Unlock()
	c.Purge(request(t, "GET", "http://example.com/p2").Key)
	c.disk.mu.Lock()
	e := diskEntry{key: hashKey(request(t, "GET", "http://example.com/p2").Key), id: 1}
	e.setSize(10)
	c.disk.loadLocked(e)
	c.disk.loading.Store(false)
	c.disk.mu.Unlock()
	if v, _, _ := served(t, c, "http://example.com/p2"); v != Miss {
		t.Fatalf("an object purged while loading came back: %v", v)
	}
}

// After a restart the object stored last stands, as it did while
// running, even when the clock that named the files was set back between
// the runs (file ids come from it).
func TestDiskRestartKeepsTheLastStored(t *testing.T) {
	dir := t.TempDir()
	const u = "http://example.com/r"
	c := diskCache(t, dir, nil)
	c.disk.nextID.Store(1 << 62) // this run's clock was far ahead
	storeOn(t, c, u, body(100, 1), 100)
	c.Close()
	c = diskCache(t, dir, nil) // the clock set right: smaller ids
	storeOn(t, c, u, body(100, 2), 100)
	servedAcrossRestart(t, c, dir, u, body(100, 2))
}

// servedAcrossRestart checks that u is a hit on want in c, and again
// after c is closed and dir opened anew, the only object there, with no
// disk error.
func servedAcrossRestart(t *testing.T, c *Cache, dir, u string, want []byte) {
	t.Helper()
	for _, when := range []string{"before", "after"} {
		if when == "after" {
			c.Close()
			c = diskCache(t, dir, nil)
		}
		if v, _, got := served(t, c, u); v != Hit || !bytes.Equal(got, want) {
			t.Fatalf("%s the restart: %v, %d bytes; want a hit on the body stored last", when, v, len(got))
		}
	}
	if s := c.Stats(); s.DiskObjects != 1 || s.DiskErrors != 0 {
		t.Errorf("%d objects on disk, %d disk errors; want 1 and 0", s.DiskObjects, s.DiskErrors)
	}
}

// Two stores of one URL that finish in the other order than they began
// (the first one's body was the longer to arrive): the one that finished
// last stands, before and after a restart.
func TestDiskRestartKeepsTheLastFinished(t *testing.T) {
	dir := t.TempDir()
	const u = "http://example.com/twice"
	c := diskCache(t, dir, nil)
	admit := func() *Writer {
		w := c.Admit(request(t, "GET", u), response(t, "200 OK", "Cache-Control: max-age=3600", "Date: {0}"), 100, t0, t0, nil)
		if w == nil {
			t.Fatal("not admitted")
		}
		return w
	}
	first, second := admit(), admit()
	if second.dw == nil {
		t.Fatal("the second store has no disk copy")
	}
	committed := second.dw.done // closed once its record is journaled
	second.Write(body(100, 2))
	second.Finish(true)
	<-committed
	first.Write(body(100, 1))
	first.Finish(true)
	c.disk.writers.Wait()
	servedAcrossRestart(t, c, dir, u, body(100, 1))
}

// A purge made while a new process waits for the store (an upgrade's old
// process still holds it) holds once the index loads, whatever ids the
// journal's records carry.
func TestDiskPurgeWhileWaitingHolds(t *testing.T) {
	dir := t.TempDir()
	const u = "http://example.com/p"
	old := diskCache(t, dir, nil)
	old.disk.nextID.Store(1 << 62) // its clock was far ahead
	storeOn(t, old, u, body(100, 1), 100)
	cfg := DefaultConfig()
	cfg.Disk, cfg.DiskSize, cfg.MaxObject = dir, 64<<20, 32<<20
	c, err := Open(cfg, Options{TakeOver: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if n := c.Purge(request(t, "GET", u).Key); n != 0 {
		t.Fatalf("purged %d before the index loaded; want 0", n)
	}
	old.Close()
	<-c.disk.ready
	if v, _, _ := served(t, c, u); v != Miss {
		t.Fatalf("an object purged while the store was held elsewhere came back: %v", v)
	}
	if s := c.Stats(); s.DiskObjects != 0 {
		t.Errorf("%d objects on disk; want 0", s.DiskObjects)
	}
}

// A body of unknown length that outgrows max_object_in_memory is kept on
// disk only, and the requests collapsed on it are served from there.
func TestDiskOnlyFlight(t *testing.T) {
	c := diskCache(t, t.TempDir(), func(c *Config) { c.MaxObjectInMemory = 4 << 10 })
	r := request(t, "GET", url)
	f, leader := c.Join(r, t0)
	if !leader {
		t.Fatal("no leader")
	}
	w := c.Admit(r, response(t, "200 OK", "Cache-Control: max-age=60", "Date: {0}"), -1, t0, t0, f)
	want := body(100<<10, 4)
	w.Write(want[:50<<10])
	w.Write(want[50<<10:])
	w.Finish(true)
	o, end := f.Wait(1<<62, nil)
	if end != Shared || o == nil || !o.OnDisk() || o.Length() != int64(len(want)) {
		t.Fatalf("follower: %v %v", end, o)
	}
	if v, fromDisk, got := served(t, c, url); v != Hit || !fromDisk || !bytes.Equal(got, want) {
		t.Fatalf("disk-only object: %v %v %d bytes", v, fromDisk, len(got))
	}
}

// The index loads from the journal alone: 100k objects without opening a
// file.
func TestDiskIndexLoad(t *testing.T) {
	dir := t.TempDir()
	const n = 100_000
	if err := WriteSyntheticIndex(dir, n, 1000); err != nil {
		t.Fatal(err)
	}
	c := diskCache(t, dir, func(c *Config) { c.DiskSize = 1 << 40 })
	if s := c.Stats(); s.DiskObjects != n || s.IndexObjectsLoaded != n || s.DiskBytes != n*1000 {
		t.Fatalf("loaded %+v", s)
	}
}

// Requests that miss store objects while the index is still loading: the
// loader and the writer share the index under one lock (run with -race;
// the loader once sized the index without the lock), and both the loaded
// objects and the new one are there at the end.
func TestDiskStoreWhileIndexLoads(t *testing.T) {
	dir := t.TempDir()
	const n = 50_000
	if err := WriteSyntheticIndex(dir, n, 1000); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Disk, cfg.DiskSize, cfg.MaxObject = dir, 1<<40, 32<<20
	c, err := Open(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	storeOn(t, c, "http://example.com/during-load", body(100, 3), 100)
	<-c.disk.ready
	if s := c.Stats(); s.DiskObjects != n+1 {
		t.Fatalf("after the load: %d objects on disk, want %d (%d disk errors)", s.DiskObjects, n+1, s.DiskErrors)
	}
	if v, fromDisk, got := served(t, c, "http://example.com/during-load"); v != Hit || !bytes.Equal(got, body(100, 3)) {
		t.Fatalf("object stored during the load: %v (from disk %v), %d bytes", v, fromDisk, len(got))
	}
}

// A journal that is not a peerd journal is moved aside, kept as it was,
// and the store starts empty and stores.
func TestDiskForeignJournalMovedAside(t *testing.T) {
	dir := t.TempDir()
	foreign := []byte("not a journal of ours\n")
	if err := os.WriteFile(filepath.Join(dir, "journal"), foreign, 0o640); err != nil {
		t.Fatal(err)
	}
	c := diskCache(t, dir, nil)
	storeOn(t, c, "http://example.com/after", body(100, 5), 100)
	if s := c.Stats(); s.DiskObjects != 1 || s.DiskErrors != 0 {
		t.Fatalf("after storing on a foreign journal's store: %d objects, %d errors; want 1, 0", s.DiskObjects, s.DiskErrors)
	}
	aside, _ := filepath.Glob(filepath.Join(dir, "journal.unreadable-*"))
	if len(aside) != 1 {
		t.Fatalf("moved aside: %v; want one file", aside)
	}
	if got, _ := os.ReadFile(aside[0]); !bytes.Equal(got, foreign) {
		t.Errorf("the file moved aside holds %q; want %q", got, foreign)
	}
}

// A journal that cannot be opened turns the disk store off, with one
// error, not one per object; memory caching goes on.
func TestDiskJournalCannotOpen(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "journal"), 0o750); err != nil { // a directory where the file goes
		t.Fatal(err)
	}
	c := diskCache(t, dir, nil)
	if c.disk.storing() {
		t.Fatal("the store takes objects with no journal to name them in")
	}
	for i := range 3 {
		u := fmt.Sprintf("http://example.com/%d", i)
		storeOn(t, c, u, body(100, byte(i)), 100)
		if v, fromDisk, got := served(t, c, u); v != Hit || fromDisk || !bytes.Equal(got, body(100, byte(i))) {
			t.Fatalf("%s: %v, from disk %v, %d bytes; want a hit from memory", u, v, fromDisk, len(got))
		}
	}
	if s := c.Stats(); s.DiskObjects != 0 || s.DiskErrors != 1 {
		t.Errorf("%d objects on disk, %d disk errors; want 0 and 1", s.DiskObjects, s.DiskErrors)
	}
}

// BenchmarkDiskIndexLoad reports the index load rate at 1M objects.
func BenchmarkDiskIndexLoad(b *testing.B) {
	dir := b.TempDir()
	const n = 1_000_000
	if err := WriteSyntheticIndex(dir, n, 1000); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		cfg := DefaultConfig()
		cfg.Disk, cfg.DiskSize = dir, 1<<40
		c, err := Open(cfg, Options{})
		if err != nil {
			b.Fatal(err)
		}
		<-c.disk.ready
		if c.Stats().DiskObjects != n {
			b.Fatal("not all loaded")
		}
		c.Close()
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "objects/s")
}

// A file the journal does not name (a crash between the rename and the
// record) is removed after the index loads; named ones stay.
func TestDiskSweepsOrphans(t *testing.T) {
	dir := t.TempDir()
	c := diskCache(t, dir, nil)
	storeOn(t, c, "http://example.com/kept", body(100, 1), 100)
	c.disk.nextID.Store(1 << 62) // the clock jumps far ahead
	storeOn(t, c, "http://example.com/kept-ahead", body(100, 2), 100)
	c.Close()
	// Left by a process that died writing them: one named by a clock
	// behind this start, one by a clock far ahead of it.
	var orphans []string
	for _, id := range []uint64{0x107, 1<<62 + 0x1000} {
		p := c.disk.objectPath(id)
		os.MkdirAll(filepath.Dir(p), 0o750)
		os.WriteFile(p, []byte("left over"), 0o640)
		orphans = append(orphans, p)
	}
	c = diskCache(t, dir, nil)
	<-c.disk.swept
	for _, p := range orphans {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("the orphan %s is still there: %v", filepath.Base(p), err)
		}
	}
	for i, u := range []string{"http://example.com/kept", "http://example.com/kept-ahead"} {
		if v, _, got := served(t, c, u); v != Hit || !bytes.Equal(got, body(100, byte(i+1))) {
			t.Fatalf("the named object %s: %v, %d bytes", u, v, len(got))
		}
	}
}

// The sweep reads the index a slab chunk at a time: on an index of
// several chunks, the files of entries in every chunk stay, and only the
// one the journal does not name goes.
func TestDiskSweepReadsEveryChunk(t *testing.T) {
	dir := t.TempDir()
	n := 3*chunkLen + 10
	if err := WriteSyntheticIndex(dir, n, 100); err != nil {
		t.Fatal(err)
	}
	d := &disk{dir: dir}
	write := func(id uint64) string {
		p := d.objectPath(id)
		os.MkdirAll(filepath.Dir(p), 0o750)
		os.WriteFile(p, []byte("object"), 0o640)
		return p
	}
	var named []string
	for _, id := range []uint64{1, chunkLen + 1, 2*chunkLen + 8, uint64(n)} {
		named = append(named, write(id))
	}
	orphan := write(uint64(n) + 100)
	c := diskCache(t, dir, nil)
	<-c.disk.swept
	if got := c.Stats().DiskObjects; got != int64(n) {
		t.Fatalf("%d objects loaded of %d", got, n)
	}
	for _, p := range named {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("the named file %s was swept: %v", filepath.Base(p), err)
		}
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Errorf("the orphan is still there: %v", err)
	}
}

// A 304 that refreshes an earlier process's object while the sweep runs
// writes a head file the sweep's list of names has not seen: the sweep
// keeps it, and the object stays whole with its new head. (The sweep is
// run here by hand, the refresh falling between its two steps.)
func TestDiskSweepKeepsAHeadRefreshedMeanwhile(t *testing.T) {
	dir := t.TempDir()
	const u = "http://example.com/refreshed-while-swept"
	want := body(200<<10, 3)
	c := diskCache(t, dir, nil)
	storeOn(t, c, u, want, int64(len(want)))
	c.Close()
	c = diskCache(t, dir, nil)
	<-c.disk.swept
	d := c.disk
	d.mu.Lock()
	d.fresh = map[uint64]struct{}{} // a sweep begins, as load starts one
	d.mu.Unlock()
	known := d.sweepIDs()
	later := t0.Add(2 * time.Hour)
	r := request(t, "GET", u)
	o, v, _ := c.Find(r, later)
	if o == nil || v != Stale {
		t.Fatalf("before the refresh: %v; want the stale object", v)
	}
	c.Refresh(o, r, response(t, "304 Not Modified", "Cache-Control: max-age=3600", "X-Refresh: 1", "Date: {7200}"), later, later)
	d.writers.Wait()
	d.sweepFiles(d.idsFrom, known)
	c.Close()
	c = diskCache(t, dir, nil)
	o, v, _ = c.Find(request(t, "GET", u), later)
	if o == nil || v != Hit || !strings.Contains(string(o.AppendFields(nil)), "X-Refresh: 1\r\n") {
		t.Fatalf("after the sweep and a restart: %v; want fresh by the refreshed head", v)
	}
	if v, _, got := servedAt(t, c, u, later); v != Hit || !bytes.Equal(got, want) {
		t.Fatalf("after the sweep and a restart: %v, %d bytes; want the whole body", v, len(got))
	}
}

// refresh_ims: a conditional request for a matching URL is revalidated
// even when the stored response is fresh; other requests are hits.
func TestRefreshIMS(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RefreshPatterns = []RefreshPattern{{Pattern: `/Release$`, RefreshIMS: true}, {Pattern: `.`}}
	c := New(cfg)
	for _, u := range []string{"http://example.com/dists/Release", "http://example.com/pool/a.deb"} {
		w := c.Admit(request(t, "GET", u), response(t, "200 OK", "Cache-Control: max-age=3600", "Date: {0}", "Last-Modified: {-3000}"), 2, t0, t0, nil)
		w.Write([]byte("ok"))
		w.Finish(true)
	}
	ims := "If-Modified-Since: {-10}"
	for _, tc := range []struct {
		u      string
		fields []string
		want   Verdict
	}{
		{"http://example.com/dists/Release", []string{ims}, Stale},
		{"http://example.com/dists/Release", nil, Hit},
		{"http://example.com/pool/a.deb", []string{ims}, Hit},
	} {
		if _, v, _ := c.Find(request(t, "GET", tc.u, tc.fields...), t0); v != tc.want {
			t.Errorf("%s %v: %v, want %v", tc.u, tc.fields, v, tc.want)
		}
	}
}

// A disk-only body of known length is shared with the requests collapsed
// on it: they read its file as the disk writer writes it.
func TestDiskOnlyFollowersStream(t *testing.T) {
	c := diskCache(t, t.TempDir(), func(c *Config) { c.MaxObjectInMemory = 4 << 10 })
	r := request(t, "GET", url)
	f, _ := c.Join(r, t0)
	if g, lead := c.Join(request(t, "GET", url), t0); g != f || lead {
		t.Fatal("no follower")
	}
	want := body(300<<10, 6)
	w := c.Admit(r, response(t, "200 OK", "Cache-Control: max-age=60", "Date: {0}"), int64(len(want)), t0, t0, f)
	o, end := f.Wait(time.Minute, nil)
	if end != Shared || !o.FromDiskWriter() {
		t.Fatalf("follower: %v, from the disk writer %v", end, o != nil && o.FromDiskWriter())
	}
	got := make(chan []byte)
	go func() {
		bs := o.NewBodyStream()
		defer bs.Close()
		var b []byte
		for off := int64(0); ; {
			p, done, failed := bs.Next(off)
			b = append(b, p...)
			off += int64(len(p))
			if failed {
				got <- nil
				return
			}
			if done && off >= o.Length() {
				got <- b
				return
			}
		}
	}()
	for p := want; len(p) > 0; {
		k := min(len(p), 50000)
		w.Write(p[:k])
		p = p[k:]
	}
	w.Finish(true)
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("the follower read %d bytes", len(b))
	}
	c.disk.writers.Wait()
	if v, fromDisk, b := served(t, c, url); v != Hit || !fromDisk || !bytes.Equal(b, want) {
		t.Fatalf("after the commit: %v %v %d", v, fromDisk, len(b))
	}

	// A body that breaks off fails its followers.
	r2 := request(t, "GET", url+"2")
	f2, _ := c.Join(r2, t0)
	c.Join(request(t, "GET", url+"2"), t0)
	w2 := c.Admit(r2, response(t, "200 OK", "Cache-Control: max-age=60", "Date: {0}"), int64(len(want)), t0, t0, f2)
	o2, _ := f2.Wait(time.Minute, nil)
	w2.Write(want[:100000])
	w2.Finish(false)
	bs := o2.NewBodyStream()
	defer bs.Close()
	for off := int64(0); ; {
		p, done, failed := bs.Next(off)
		off += int64(len(p))
		if failed {
			break
		}
		if done {
			t.Fatal("a body that broke off ended as done")
		}
	}
}

// A graceful stop right after responses ended commits them: every object
// whose body arrived whole before the stop is there after it.
func TestDiskCloseCommitsWholeBodies(t *testing.T) {
	dir := t.TempDir()
	c := diskCache(t, dir, nil)
	for i := range 50 {
		r := request(t, "GET", fmt.Sprintf("http://example.com/c%d", i))
		w := c.Admit(r, response(t, "200 OK", "Cache-Control: max-age=3600", "Date: {0}"), 70000, t0, t0, nil)
		w.Write(body(70000, byte(i)))
		w.Finish(true)
	}
	// Not finished: given up.
	w := c.Admit(request(t, "GET", "http://example.com/partial"), response(t, "200 OK", "Cache-Control: max-age=3600", "Date: {0}"), 70000, t0, t0, nil)
	w.Write(body(1000, 1))
	c.Close()
	c = diskCache(t, dir, nil)
	if s := c.Stats(); s.DiskObjects != 50 {
		t.Fatalf("after a close right after 50 whole bodies: %d on disk", s.DiskObjects)
	}
}

// The variants of one key: a new one joins, the same variant replaces
// the old, the oldest goes past maxVariants, and removal keeps the rest.
func TestDiskVariantChain(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	d := &disk{capacity: 1 << 40, dir: t.TempDir(), log: log}
	k := hashKey([]byte("k"))
	var dropped []diskEntry
	for i := range maxVariants + 1 {
		e := diskEntry{key: k, sec: secHash(i), id: uint64(i + 1)}
		e.setSize(1)
		_, got := d.insertLocked(e)
		dropped = append(dropped, got...)
	}
	if d.chainLen(k) != maxVariants || len(dropped) != 1 || dropped[0].sec != 0 || d.objects != maxVariants {
		t.Fatalf("past maxVariants: %d variants, dropped %v", d.chainLen(k), dropped)
	}
	e := diskEntry{key: k, sec: 5, id: 100}
	e.setSize(1)
	if _, got := d.insertLocked(e); len(got) != 1 || got[0].id != 6 {
		t.Fatalf("the same variant did not replace the old: %v", got)
	}
	if !d.removeLocked(&diskEntry{key: k, id: 100}) || d.removeLocked(&diskEntry{key: k, id: 100}) {
		t.Fatal("remove by id")
	}
	es := d.lookup(k)
	if len(es) != maxVariants-1 || d.objects != maxVariants-1 || d.bytes != int64(maxVariants-1) {
		t.Fatalf("after the remove: %d entries, %d objects, %d bytes", len(es), d.objects, d.bytes)
	}
	for i := 1; i < len(es); i++ {
		if es[i].id <= es[i-1].id {
			t.Fatal("the chain is not oldest first")
		}
	}
	if d.purge(k) != maxVariants-1 || d.chainLen(k) != 0 || d.ix.keys != 0 || d.objects != 0 {
		t.Fatal("purge left entries")
	}
}

// A 304 that refreshes a stored object reaches the disk too: after a
// restart the object is fresh by the refreshed head, for a body in memory
// and for one on disk only; a refresh that says no-store drops it there.
func TestDiskRefreshPersists(t *testing.T) {
	dir := t.TempDir()
	small := func(c *Config) { c.MaxObjectInMemory = 4 << 10 }
	c := diskCache(t, dir, small)
	stale := response(t, "200 OK", "Cache-Control: max-age=1", "Date: {0}", "ETag: \"v1\"")
	later := t0.Add(20 * time.Second)
	for _, tc := range []struct {
		u string
		n int
	}{{"http://example.com/rs", 1000}, {"http://example.com/rl", 100 << 10}, {"http://example.com/gone", 1000}} {
		r := request(t, "GET", tc.u)
		w := c.Admit(r, stale, int64(tc.n), t0, t0, nil)
		w.Write(body(tc.n, 3))
		w.Finish(true)
		c.disk.writers.Wait()
		o, v, _ := c.Find(r, later)
		if v != Stale {
			t.Fatalf("%s: %v before the refresh", tc.u, v)
		}
		cc := "Cache-Control: max-age=3600"
		if strings.HasSuffix(tc.u, "gone") {
			cc = "Cache-Control: no-store"
		}
		c.Refresh(o, r, response(t, "304 Not Modified", cc, "Date: {10}"), later, later)
		c.disk.writers.Wait()
	}
	c.Close()
	c = diskCache(t, dir, small)
	for _, u := range []string{"http://example.com/rs", "http://example.com/rl"} {
		if v, fromDisk, b := servedAt(t, c, u, later); v != Hit || !fromDisk || len(b) == 0 {
			t.Fatalf("%s after a restart: %v (from disk %v, %d bytes); want fresh by the refreshed head", u, v, fromDisk, len(b))
		}
	}
	if v, _, _ := servedAt(t, c, "http://example.com/gone", later); v != Miss {
		t.Fatalf("refreshed with no-store: %v after a restart", v)
	}
	if s := c.Stats(); s.DiskObjects != 2 {
		t.Fatalf("%d objects on disk; want the 2 refreshed ones (the old files replaced)", s.DiskObjects)
	}
}

// objectFiles lists the files under dir/objects (name -> size).
func objectFiles(t testing.TB, dir string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	filepath.WalkDir(filepath.Join(dir, "objects"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if st, err := os.Stat(p); err == nil {
				out[filepath.Base(p)] = st.Size()
			}
		}
		return nil
	})
	return out
}

// TestDiskRefreshWritesTheHeadOnly: twenty 304s for a large object, one
// read from disk and one kept in memory too, leave its object file as it
// was (no body written again) beside one small head file; after a
// restart the object is fresh by the last 304's head, with its body.
func TestDiskRefreshWritesTheHeadOnly(t *testing.T) {
	for _, inMemory := range []int64{4 << 10, 8 << 20} {
		dir := t.TempDir()
		mut := func(c *Config) { c.MaxObjectInMemory = conf.ByteSize(inMemory) }
		c := diskCache(t, dir, mut)
		u := fmt.Sprintf("http://example.com/big-%d", inMemory)
		want := body(2<<20, 7)
		r := request(t, "GET", u)
		w := c.Admit(r, response(t, "200 OK", "Cache-Control: max-age=1", "Date: {0}", `ETag: "v1"`), int64(len(want)), t0, t0, nil)
		w.Write(want)
		w.Finish(true)
		c.disk.writers.Wait()
		before := objectFiles(t, dir)
		at := t0
		for i := 1; i <= 20; i++ {
			at = t0.Add(time.Duration(i) * 10 * time.Second)
			o, v, _ := c.Find(r, at)
			if o == nil || v != Stale {
				t.Fatalf("refresh %d: %v; want the stale object", i, v)
			}
			c.Refresh(o, r, response(t, "304 Not Modified", "Cache-Control: max-age=5", fmt.Sprintf("X-Refresh: %d", i), fmt.Sprintf("Date: {%d}", i*10)), at, at)
			c.disk.writers.Wait()
		}
		after := objectFiles(t, dir)
		var heads int
		for name, size := range after {
			if strings.Contains(name, ".") {
				heads++
				if size > 4<<10 {
					t.Fatalf("head file %s is %d bytes", name, size)
				}
				continue
			}
			if before[name] != size {
				t.Fatalf("object file %s: %d bytes, was %d (want it untouched: a 304 rewrites no body)", name, size, before[name])
			}
		}
		if heads != 1 || len(after) != len(before)+1 {
			t.Fatalf("files %v, were %v; want the object files as they were and one head file", after, before)
		}
		c.Close()
		c = diskCache(t, dir, mut)
		o, v, _ := c.Find(r, at)
		if v != Hit || !strings.Contains(string(o.AppendFields(nil)), "X-Refresh: 20\r\n") {
			t.Fatalf("after a restart: %v; want fresh by the 20th 304", v)
		}
		if v, _, got := servedAt(t, c, u, at); v != Hit || !bytes.Equal(got, want) {
			t.Fatalf("after a restart: %v, %d bytes; want the whole body", v, len(got))
		}
		c.Close()
	}
}

// TestDiskRefreshCrashSafe: a head file the journal never named (a crash
// between the two) is swept and the object keeps its last committed
// head; a head file cut short is never served: the object is dropped.
func TestDiskRefreshCrashSafe(t *testing.T) {
	dir := t.TempDir()
	const u = "http://example.com/crash"
	c := diskCache(t, dir, nil)
	r := request(t, "GET", u)
	storeOn(t, c, u, body(5000, 1), 5000)
	later := t0.Add(2 * time.Hour)
	o, _, _ := c.Find(r, later)
	c.Refresh(o, r, response(t, "304 Not Modified", "Cache-Control: max-age=3600", "X-Refresh: 1", "Date: {7200}"), later, later)
	c.disk.writers.Wait()
	c.Close()
	var head string
	for name := range objectFiles(t, dir) {
		if id, gen, ok := strings.Cut(name, "."); ok {
			head = filepath.Join(dir, "objects", filepath.Base(filepath.Dir(c.disk.objectPath(mustHex(t, id)))), name)
			// A crash after writing generation 2, before its record.
			os.WriteFile(head[:len(head)-len(gen)]+"2", []byte("PEERDHD1 unfinished"), 0o640)
		}
	}
	if head == "" {
		t.Fatal("no head file after a refresh")
	}
	c = diskCache(t, dir, nil)
	<-c.disk.swept
	if o, v, _ := c.Find(r, later); v != Hit || !strings.Contains(string(o.AppendFields(nil)), "X-Refresh: 1\r\n") {
		t.Fatalf("after a crash mid-refresh: %v; want the committed head", v)
	}
	if _, err := os.Stat(head[:len(head)-1] + "2"); !os.IsNotExist(err) {
		t.Fatalf("the unnamed head file is still there: %v", err)
	}
	c.Close()
	b, _ := os.ReadFile(head)
	os.WriteFile(head, b[:len(b)-3], 0o640)
	c = diskCache(t, dir, nil)
	if v, _, got := servedAt(t, c, u, later); v == Hit || got != nil {
		t.Fatalf("a torn head file: %v, %d bytes served", v, len(got))
	}
	if s := c.Stats(); s.DiskObjects != 0 {
		t.Fatalf("%d objects on disk; want the one with a torn head dropped", s.DiskObjects)
	}
}

func mustHex(t testing.TB, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestDiskFollowsNoLinks: a LOCK that is a link to a file elsewhere is
// refused, its target untouched; an object directory that is a link is
// removed at start, never listed, so the sweep deletes nothing through it.
func TestDiskFollowsNoLinks(t *testing.T) {
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	os.WriteFile(victim, []byte("precious"), 0o644)

	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "objects"), 0o750)
	os.Symlink(victim, filepath.Join(dir, "LOCK"))
	cfg := DefaultConfig()
	cfg.Disk = dir
	if _, err := Open(cfg, Options{}); err == nil {
		t.Fatal("a LOCK that is a link was opened")
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Fatalf("the LOCK link's target was changed: %q", b)
	}

	dir = t.TempDir()
	os.MkdirAll(filepath.Join(dir, "objects"), 0o750)
	// A name the sweep would take for an object file no journal names.
	os.WriteFile(filepath.Join(outside, "18edb5966ee0264c"), []byte("not ours"), 0o644)
	os.Symlink(outside, filepath.Join(dir, "objects", "4c"))
	c := diskCache(t, dir, nil)
	<-c.disk.swept
	if _, err := os.Stat(filepath.Join(outside, "18edb5966ee0264c")); err != nil {
		t.Fatalf("the sweep deleted a file through a link: %v", err)
	}
	if st, err := os.Lstat(filepath.Join(dir, "objects", "4c")); err == nil && st.Mode()&os.ModeSymlink != 0 {
		t.Fatal("the linked object directory is still a link")
	}
	storeOn(t, c, "http://example.com/x", body(100, 1), 100)
	if v, _, got := served(t, c, "http://example.com/x"); v != Hit || len(got) != 100 {
		t.Fatalf("storing after the link was removed: %v", v)
	}
}

// TestDiskOpenFailureKeepsTheObject: a lookup whose open fails for a
// passing reason (too many open files) is a miss and keeps the object;
// the next lookup finds it.
func TestDiskOpenFailureKeepsTheObject(t *testing.T) {
	dir := t.TempDir()
	small := func(c *Config) { c.MaxObjectInMemory = 1 << 10 }
	c := diskCache(t, dir, small)
	const u = "http://example.com/emfile"
	want := body(100<<10, 5)
	storeOn(t, c, u, want, int64(len(want)))
	c.Close()
	c = diskCache(t, dir, small)
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skip(err)
	}
	low := lim
	low.Cur = 64
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skip(err)
	}
	// Every descriptor below the limit taken: the next open fails.
	var held []*os.File
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		held = append(held, f)
	}
	_, v, _ := c.Find(request(t, "GET", u), t0)
	for _, f := range held {
		f.Close()
	}
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	if v != Miss {
		t.Fatalf("with no file descriptor to spare: %v; want a miss", v)
	}
	if s := c.Stats(); s.DiskObjects != 1 {
		t.Fatalf("%d objects on disk after a failed open; want the object kept", s.DiskObjects)
	}
	if v, _, got := served(t, c, u); v != Hit || !bytes.Equal(got, want) {
		t.Fatalf("once files can be opened: %v, %d bytes", v, len(got))
	}
}

// TestDiskJournalSizesBounded: records whose sizes could overflow the
// byte count are not believed: disk_size is still enforced.
func TestDiskJournalSizesBounded(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "objects"), 0o750)
	b := []byte(journalHdr)
	for i := range 2 {
		e := diskEntry{key: hashKey([]byte(fmt.Sprint(i))), id: uint64(i + 1)}
		r := appendRecord(nil, opAdd, &e)
		binary.BigEndian.PutUint64(r[28:], 1<<62) // more than an entry can hold
		binary.BigEndian.PutUint32(r[44:], crc32.Checksum(r[:44], castagnoli))
		b = append(b, r...)
	}
	os.WriteFile(filepath.Join(dir, "journal"), b, 0o640)
	c := diskCache(t, dir, func(c *Config) { c.DiskSize = 1 << 20 })
	if s := c.Stats(); s.DiskObjects != 0 || s.DiskBytes != 0 || s.DiskErrors == 0 {
		t.Fatalf("after records of 2^62 bytes: %+v; want them skipped and counted", s)
	}
	for i := range 20 {
		storeOn(t, c, fmt.Sprintf("http://example.com/%d", i), body(100<<10, byte(i)), 100<<10)
	}
	if s := c.Stats(); s.DiskBytes > 1<<20 {
		t.Fatalf("%d bytes on disk; disk_size is 1 MiB", s.DiskBytes)
	}
}

// TestDiskKeepsWhatItStoredBeforeItsLoad: objects a process stores while
// it waits for the store (an upgrade's old process still holds it) are
// this process's, not an earlier one's orphans: the sweep after the index
// loads leaves their files alone. (Their ids were taken for an earlier
// process's, and a file whose record had not reached the index yet was
// removed: a stored object lost.)
func TestDiskKeepsWhatItStoredBeforeItsLoad(t *testing.T) {
	dir := t.TempDir()
	old := diskCache(t, dir, nil)
	cfg := DefaultConfig()
	cfg.Disk, cfg.DiskSize, cfg.MaxObject, cfg.MaxObjectInMemory = dir, 64<<20, 32<<20, 64
	c, err := Open(cfg, Options{TakeOver: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	const n = 40
	for i := range n {
		u := fmt.Sprintf("http://example.com/waiting/%d", i)
		w := c.Admit(request(t, "GET", u), response(t, "200 OK", "Cache-Control: max-age=3600", "Date: {0}", "ETag: \"v1\""), 1000, t0, t0, nil)
		if w == nil {
			t.Fatalf("%s: not admitted", u)
		}
		w.Write(body(1000, byte(i)))
		w.Finish(true)
	}
	// The files are written whole before their commits wait for the
	// journal (a write the queue gave up on has none): count what is
	// there once the count settles.
	count := func() int {
		files, _ := filepath.Glob(filepath.Join(dir, "objects", "*", "*"))
		return len(files)
	}
	// Every one is written unless its queue stayed full (a loaded
	// machine): wait for all, and take what is there after 10 s.
	written := count()
	for deadline := time.Now().Add(10 * time.Second); written < n && time.Now().Before(deadline); written = count() {
		time.Sleep(20 * time.Millisecond) // polling the file system; nothing is decided by it
	}
	if written < n/2 {
		t.Fatalf("%d of %d objects written while waiting", written, n)
	}
	old.Close()
	<-c.disk.swept
	c.disk.writers.Wait()
	if k := count(); k != written {
		t.Fatalf("%d object files after the sweep; want the %d written while the store was held elsewhere", k, written)
	}
}

// TestDiskRefreshNeverHeadsAnotherVersion: v1 is on disk; v2 replaces it
// in memory while the disk store is paused (its disk write never
// starts); a 304 then refreshes v2. Its head must not go to v1's entry
// (v2's validator over v1's body, served after a restart): v2 is written
// whole instead, or v1 stays as it was.
func TestDiskRefreshNeverHeadsAnotherVersion(t *testing.T) {
	dir := t.TempDir()
	mut := func(c *Config) { c.MaxObjectInMemory = 8 << 20 }
	c := diskCache(t, dir, mut)
	u := "http://example.com/versions"
	v1 := body(50000, 1)
	storeOn(t, c, u, v1, int64(len(v1)))
	c.disk.pausedUntil.Store(time.Now().Add(time.Hour).UnixNano())
	v2 := body(50000, 2)
	r := request(t, "GET", u)
	w := c.Admit(r, response(t, "200 OK", "Cache-Control: max-age=1", "Date: {0}", `ETag: "v2"`), int64(len(v2)), t0, t0, nil)
	w.Write(v2)
	w.Finish(true)
	c.disk.pausedUntil.Store(0)
	at := t0.Add(10 * time.Second)
	o, v, _ := c.Find(r, at)
	if o == nil || v != Stale || !strings.Contains(string(o.AppendFields(nil)), `ETag: "v2"`) {
		t.Fatalf("before the 304: %v; want v2, stale", v)
	}
	c.Refresh(o, r, response(t, "304 Not Modified", `ETag: "v2"`, "Cache-Control: max-age=3600", "Date: {10}"), at, at)
	c.disk.writers.Wait()
	c.Close()

	c = diskCache(t, dir, mut)
	o, _, _ = c.Find(r, at)
	if o == nil {
		return // nothing kept: no harm
	}
	head := string(o.AppendFields(nil))
	_, _, got := servedAt(t, c, u, at)
	switch {
	case strings.Contains(head, `ETag: "v2"`) && !bytes.Equal(got, v2):
		t.Fatalf("after a restart: v2's head over another body (v1's: %v)", bytes.Equal(got, v1))
	case strings.Contains(head, `ETag: "v1"`) && !bytes.Equal(got, v1):
		t.Fatal("after a restart: v1's head over another body")
	}
}

// BenchmarkDiskEviction is the CPU of one eviction from a full store of
// N generated objects (10k and 1M; PEERD_BENCH_OBJECTS sets other sizes,
// "10000,1000000,10000000"): CLOCK's pick, the index's drop, the journal's
// record and the unlink (which finds no file: generated objects have
// none); cpu-ns/op is the process's CPU, user and system, over the
// evictions. The store is reloaded, off the clock, when it runs out; the
// load's sweep and garbage are done before the clock runs.
func BenchmarkDiskEviction(b *testing.B) {
	sizes := []int{10_000, 1_000_000}
	if s := os.Getenv("PEERD_BENCH_OBJECTS"); s != "" {
		sizes = sizes[:0]
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatalf("PEERD_BENCH_OBJECTS: %v", err)
			}
			sizes = append(sizes, n)
		}
	}
	const size = 10 << 10
	for _, n := range sizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			gen := b.TempDir()
			if err := WriteSyntheticIndex(gen, n, size); err != nil {
				b.Fatal(err)
			}
			journal, err := os.ReadFile(filepath.Join(gen, "journal"))
			if err != nil {
				b.Fatal(err)
			}
			dir := b.TempDir()
			var c *Cache
			left := 0
			load := func() {
				if c != nil {
					c.Close()
				}
				if err := os.WriteFile(filepath.Join(dir, "journal"), journal, 0o640); err != nil {
					b.Fatal(err)
				}
				cfg := DefaultConfig()
				cfg.Disk, cfg.DiskSize = dir, conf.ByteSize(int64(n)*size)
				if c, err = Open(cfg, Options{}); err != nil {
					b.Fatal(err)
				}
				<-c.disk.ready
				<-c.disk.swept
				if got := c.Stats().DiskObjects; got != int64(n) {
					b.Fatalf("%d objects loaded, want %d", got, n)
				}
				left = n
				runtime.GC() // the load's garbage is not the eviction's
			}
			b.StopTimer()
			load()
			b.StartTimer()
			var cpu time.Duration
			start := procs.ProcessCPU()
			for range b.N {
				if left == 0 {
					cpu += procs.ProcessCPU() - start
					b.StopTimer()
					load()
					b.StartTimer()
					start = procs.ProcessCPU()
				}
				c.disk.resize(int64(left-1) * size)
				left--
			}
			cpu += procs.ProcessCPU() - start
			b.StopTimer()
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			if got := c.Stats().DiskObjects; got != int64(left) {
				b.Fatalf("%d objects left, want %d: each resize evicts one", got, left)
			}
			c.Close()
		})
	}
}

// TestDiskReadsTheWiderRecordsOfBefore: a journal written before the
// index was made smaller (16 bytes of each key's hash, 8 of each
// variant's) is read: what it names is served after the restart.
func TestDiskReadsTheWiderRecordsOfBefore(t *testing.T) {
	dir := t.TempDir()
	small := func(c *Config) { c.MaxObjectInMemory = 1 << 10 } // served from disk
	c := diskCache(t, dir, small)
	want := map[string][]byte{
		"http://example.com/small": body(5<<10, 1),   // in a segment
		"http://example.com/large": body(200<<10, 2), // a file of its own
	}
	for u, b := range want {
		storeOn(t, c, u, b, int64(len(b)))
	}
	c.Close()
	os.Remove(filepath.Join(dir, imageName)) // the journal is read
	path := filepath.Join(dir, "journal")
	j, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for r := j[len(journalHdr):]; len(r) >= recordSize; r = r[recordSize:] {
		// What those records held where this build writes nothing.
		copy(r[12:20], "\x9c\x41\x07\xee\x13\x5a\xd0\x28")
		copy(r[36:40], "\x5e\x71\xa2\x0b")
		binary.BigEndian.PutUint32(r[44:], crc32.Checksum(r[:44], castagnoli))
	}
	if err := os.WriteFile(path, j, 0o640); err != nil {
		t.Fatal(err)
	}
	c = diskCache(t, dir, small)
	for u, b := range want {
		if v, fromDisk, got := served(t, c, u); v != Hit || !fromDisk || !bytes.Equal(got, b) {
			t.Errorf("%s after the restart: %v, from disk %v, %d bytes; want a hit from disk, %d bytes", u, v, fromDisk, len(got), len(b))
		}
	}
	// A new version of each replaces the one read (the same variant):
	// two objects on disk, and the new bodies served.
	for u := range want {
		want[u] = body(len(want[u]), 9)
		storeOn(t, c, u, want[u], int64(len(want[u])))
	}
	if s := c.Stats(); s.DiskObjects != 2 {
		t.Errorf("%d objects on disk after storing new versions of both; want 2", s.DiskObjects)
	}
	for u, b := range want {
		if v, _, got := served(t, c, u); v != Hit || !bytes.Equal(got, b) {
			t.Errorf("%s once stored again: %v, %d bytes; want the new version", u, v, len(got))
		}
	}
}
