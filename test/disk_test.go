package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/peerd/peerd/internal/testbed"
)

// The disk cache through the binary (contract section 17): what was
// stored survives SIGTERM and kill -9, a write cut by kill -9 is never
// served, large bodies stream in flat memory, stale answers come from disk
// after a restart, and a full disk fails no request.

func diskConfig(dir, extra string) string {
	return directConfig + fmt.Sprintf("[cache]\ndisk = %q\ndisk_size = \"2GiB\"\nmax_object = \"1GiB\"\n%s", dir, extra)
}

// objectBody is what the origin answers for /o/N?size=S.
func objectBody(path string, size int) []byte {
	b := make([]byte, size)
	seed := byte(len(path))
	for _, c := range path {
		seed = seed*31 + byte(c)
	}
	for i := range b {
		b[i] = seed + byte(i%239)
	}
	return b
}

// diskOrigin answers /o/... with a fresh body of ?size= bytes and counts
// the requests per path.
type diskOrigin struct {
	addr  string
	mu    sync.Mutex
	count map[string]int
}

func newDiskOrigin(t *testing.T) *diskOrigin {
	o := &diskOrigin{count: map[string]int{}}
	o.addr = newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.count[r.URL.Path]++
		o.mu.Unlock()
		size, _ := strconv.Atoi(r.URL.Query().Get("size"))
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.Write(objectBody(r.URL.Path, size))
	})
	return o
}

func (o *diskOrigin) requests(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.count[path]
}

// fetchAll GETs urls with 16 clients and checks every body; it returns
// the X-Cache-ish result of each from Cache-Status (hit or fwd).
func fetchAll(t *testing.T, c *http.Client, base string, paths []string, sizes []int) (hits int) {
	t.Helper()
	var wg sync.WaitGroup
	var nHits atomic.Int64
	errs := make(chan error, len(paths))
	sem := make(chan struct{}, 16)
	for i, p := range paths {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			resp, err := c.Get(fmt.Sprintf("http://%s%s?size=%d", base, p, sizes[i]))
			if err != nil {
				errs <- err
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || !bytes.Equal(b, objectBody(p, sizes[i])) {
				errs <- fmt.Errorf("%s: status %d, %d bytes, %v", p, resp.StatusCode, len(b), err)
				return
			}
			if strings.Contains(resp.Header.Get("Cache-Status"), "hit") {
				nHits.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return int(nHits.Load())
}

func waitDiskObjects(t *testing.T, p *peerd, n int64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d objects on disk", n), 30*time.Second, func() bool {
		s := p.cacheStats()
		return !s.IndexLoading && s.DiskObjects >= n
	})
}

// indexFrom checks that p's log says its disk index was read from
// where ("image" or "journal"), with no warning about the image.
func indexFrom(t *testing.T, p *peerd, where string) {
	t.Helper()
	var line string
	waitFor(t, "the index loaded line", 10*time.Second, func() bool {
		for _, l := range strings.Split(p.Logs(), "\n") {
			if strings.Contains(l, "cache disk: index loaded") {
				line = l
				return true
			}
		}
		return false
	})
	if !strings.Contains(line, "from="+where) || strings.Contains(p.Logs(), "index image") {
		t.Fatalf("want the index read from the %s:\n%s", where, p.Logs())
	}
}

// TestDiskCacheSurvivesRestarts: thousands of objects are hits after a
// SIGTERM restart, and after a kill -9; the origin never sees a second
// request for one.
func TestDiskCacheSurvivesRestarts(t *testing.T) {
	t.Parallel()
	o := newDiskOrigin(t)
	dir := t.TempDir()
	cfg := diskConfig(dir, "")
	var paths []string
	var sizes []int
	for i := range 2000 {
		paths = append(paths, fmt.Sprintf("/o/%d", i))
		sizes = append(sizes, 100+i*7%20000)
	}
	for i := range 5 {
		paths = append(paths, fmt.Sprintf("/big/%d", i))
		sizes = append(sizes, 1<<20+i) // disk only (over max_object_in_memory)
	}
	p := startPeerd(t, cfg)
	if hits := fetchAll(t, p.client(), o.addr, paths, sizes); hits != 0 {
		t.Fatalf("%d hits on a cold cache", hits)
	}
	waitDiskObjects(t, p, int64(len(paths)))
	p.stop()

	p = startPeerd(t, cfg)
	waitDiskObjects(t, p, int64(len(paths)))
	indexFrom(t, p, "image") // the stop wrote it
	if hits := fetchAll(t, p.client(), o.addr, paths, sizes); hits != len(paths) {
		t.Fatalf("after SIGTERM: %d hits of %d", hits, len(paths))
	}
	// More objects, then kill -9.
	var more []string
	var moreSizes []int
	for i := range 500 {
		more = append(more, fmt.Sprintf("/k/%d", i))
		moreSizes = append(moreSizes, 5000+i)
	}
	// (A client the access-log agreement check does not follow: kill -9
	// loses the log lines still buffered.)
	fetchAll(t, p.Client(20*time.Second), o.addr, more, moreSizes)
	waitDiskObjects(t, p, int64(len(paths)+len(more)))
	p.Cmd.Process.Kill()
	<-p.exited

	p = startPeerd(t, cfg)
	all, allSizes := append(paths, more...), append(sizes, moreSizes...)
	waitDiskObjects(t, p, int64(len(all)))
	indexFrom(t, p, "journal") // kill -9 leaves no image
	if hits := fetchAll(t, p.client(), o.addr, all, allSizes); hits != len(all) {
		t.Fatalf("after kill -9: %d hits of %d", hits, len(all))
	}
	for _, path := range all {
		if n := o.requests(path); n != 1 {
			t.Fatalf("the origin saw %d requests for %s", n, path)
		}
	}
	lines := accessLines(t, p.accessLog, len(all))
	if countContaining(lines, "TCP_HIT/200") == 0 {
		t.Fatalf("no TCP_HIT (disk) in the access log")
	}
	if s := p.cacheStats(); s.DiskHits == 0 || s.DiskErrors != 0 {
		t.Fatalf("GET /cache: %+v", s)
	}
	resp, err := http.Get("http://" + p.admin + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), fmt.Sprintf("disk: %d objects", len(all))) {
		t.Fatalf("the status page does not show the disk tier:\n%s", page)
	}
	// A range of a disk-only object is read from disk.
	req, _ := http.NewRequest("GET", fmt.Sprintf("http://%s/big/0?size=%d", o.addr, 1<<20), nil)
	req.Header.Set("Range", "bytes=100000-299999")
	resp, err = p.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	part, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(part, objectBody("/big/0", 1<<20)[100000:300000]) {
		t.Fatalf("range of a disk object: %d, %d bytes", resp.StatusCode, len(part))
	}
}

// TestDiskCacheKilledMidWrite: kill -9 while a 32 MiB object is being
// stored; after the restart that URL is fetched whole and correct.
func TestDiskCacheKilledMidWrite(t *testing.T) {
	t.Parallel()
	const size = 32 << 20
	release := make(chan struct{})
	var requests atomic.Int32
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		n := requests.Add(1)
		b := objectBody("/big", size)
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		if n == 1 {
			w.Write(b[:size/2])
			w.(http.Flusher).Flush()
			<-release
			return
		}
		w.Write(b)
	})
	defer close(release)
	dir := t.TempDir()
	p := startPeerd(t, diskConfig(dir, ""))
	resp, err := p.Client(20 * time.Second).Get("http://" + origin + "/big") // not followed: kill -9 loses its log line
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, size/2)); err != nil {
		t.Fatal(err)
	}
	p.Cmd.Process.Kill()
	<-p.exited
	resp.Body.Close()

	p = startPeerd(t, diskConfig(dir, ""))
	waitFor(t, "the index", 10*time.Second, func() bool { return !p.cacheStats().IndexLoading })
	resp, err = p.client().Get("http://" + origin + "/big")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(b, objectBody("/big", size)) {
		t.Fatalf("after kill -9 mid-write: %d bytes, %v", len(b), err)
	}
	if n := requests.Load(); n != 2 {
		t.Fatalf("origin requests: %d; want 2 (the torn copy never served)", n)
	}
	// Now it is stored whole: a hit.
	waitFor(t, "the object on disk", 10*time.Second, func() bool { return p.cacheStats().DiskObjects == 1 })
	resp, _ = p.client().Get("http://" + origin + "/big")
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(b, objectBody("/big", size)) || requests.Load() != 2 {
		t.Fatalf("the stored copy: %d bytes, %d origin requests", len(b), requests.Load())
	}
}

// vmHWM is a process's peak resident memory in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	mib := testbed.PeakRSSMiB(pid)
	if mib == 0 {
		t.Fatalf("no VmHWM for pid %d", pid)
	}
	return int64(mib * (1 << 20))
}

// TestDiskCacheStreamsLargeObject: a 256 MiB object is relayed and stored
// with peerd's peak RSS under 150 MiB (its body is never held whole), then
// served from disk the same way.
func TestDiskCacheStreamsLargeObject(t *testing.T) {
	t.Parallel()
	bin := plainPeerdBin(t) // without -race: the detector's shadow memory is not peerd's
	const size = 256 << 20
	chunk := objectBody("/huge", 1<<20)
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		for range size / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	p := startPeerdBin(t, bin, diskConfig(t.TempDir(), ""))
	for round := range 2 {
		resp, err := p.client().Get("http://" + origin + "/huge")
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		buf := make([]byte, 1<<20)
		for {
			k, err := io.ReadFull(resp.Body, buf)
			if k > 0 && !bytes.Equal(buf[:k], chunk[:k]) {
				t.Fatalf("round %d: wrong bytes at %d", round, n)
			}
			n += int64(k)
			if err != nil {
				break
			}
		}
		resp.Body.Close()
		if n != size {
			t.Fatalf("round %d: %d bytes", round, n)
		}
		if round == 0 {
			waitFor(t, "the object on disk", 30*time.Second, func() bool { return p.cacheStats().DiskObjects == 1 })
		} else if !strings.Contains(resp.Header.Get("Cache-Status"), "hit") {
			t.Fatalf("round 1 not a hit: %q", resp.Header.Get("Cache-Status"))
		}
	}
	if rss := vmHWM(t, p.Cmd.Process.Pid); rss > 150<<20 {
		t.Fatalf("peak RSS %d MiB relaying and serving 256 MiB", rss>>20)
	} else {
		t.Logf("peak RSS %d MiB", rss>>20)
	}
}

// TestDiskCacheStaleAfterRestart: stale_if_dead answers from disk after a
// restart with every parent dead.
func TestDiskCacheStaleAfterRestart(t *testing.T) {
	t.Parallel()
	a := newFakeParent(t, "a")
	a.SetHeader("Cache-Control", "max-age=1")
	dir := t.TempDir()
	cfg := baseConfig + health(1, "1h", "1h") + fmt.Sprintf("[cache]\ndisk = %q\n", dir) + peerBlock("", a)
	p := startPeerd(t, cfg)
	resp, err := p.client().Get("http://origin.test/plain")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	waitFor(t, "the object on disk", 10*time.Second, func() bool { return p.cacheStats().DiskObjects == 1 })
	p.stop()
	a.stop()
	time.Sleep(1100 * time.Millisecond) // max-age=1: stale from now on

	p = startPeerd(t, cfg)
	waitFor(t, "a dead and the index loaded", 10*time.Second, func() bool {
		return p.peer("a").State == "dead" && !p.cacheStats().IndexLoading
	})
	resp, err = p.client().Get("http://origin.test/plain")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(got, want) || !strings.Contains(resp.Header.Get("Cache-Status"), "fwd=stale") {
		t.Fatalf("stale after a restart: %d %q (Cache-Status %q); want %q", resp.StatusCode, got, resp.Header.Get("Cache-Status"), want)
	}
}

// TestDiskCacheSecondProcessRefused: two peerds never share a disk.
func TestDiskCacheSecondProcessRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startPeerd(t, diskConfig(dir, ""))
	cfgFile := filepath.Join(t.TempDir(), "peerd.toml")
	os.WriteFile(cfgFile, []byte(diskConfig(dir, "")), 0o644)
	out, err := exec.Command(peerdBin, "-config", cfgFile).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "in use by another peerd") || !strings.Contains(string(out), strconv.Itoa(p.Cmd.Process.Pid)) {
		t.Fatalf("a second peerd on the same disk: %v\n%s", err, out)
	}
}

// TestDiskCacheFullDisk: a disk that fills up under load fails no
// request; the store stops (counted, logged once) and resumes once there
// is room again.
func TestDiskCacheFullDisk(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=6m"); err != nil {
		t.Skipf("cannot mount a tmpfs for a full disk: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	filler := filepath.Join(dir, "filler")
	os.WriteFile(filler, make([]byte, 3<<20), 0o644)
	o := newDiskOrigin(t)
	p := startPeerd(t, diskConfig(filepath.Join(dir, "cache"), ""))
	var paths []string
	var sizes []int
	for i := range 120 {
		paths = append(paths, fmt.Sprintf("/full/%d", i))
		sizes = append(sizes, 100<<10)
	}
	fetchAll(t, p.client(), o.addr, paths, sizes) // every one 200 and whole
	s := p.cacheStats()
	if s.DiskErrors == 0 {
		t.Fatalf("a full disk was not noticed: %+v", s)
	}
	if n := strings.Count(p.logs(), "stopped storing objects"); n != 1 {
		t.Fatalf("the pause was logged %d times", n)
	}
	os.Remove(filler)
	before := s.DiskObjects
	i := 0
	waitFor(t, "the store to resume", 30*time.Second, func() bool {
		i++
		fetchAll(t, p.client(), o.addr, []string{fmt.Sprintf("/later/%d", i)}, []int{1000})
		return p.cacheStats().DiskObjects > before
	})
}

// TestDiskCacheAcrossUpgrade: a binary upgrade (SIGUSR2) keeps the disk
// store: the new process takes its lock over once the old one lets go,
// and what was stored is a hit without a second origin request.
func TestDiskCacheAcrossUpgrade(t *testing.T) {
	t.Parallel()
	o := newDiskOrigin(t)
	u := startUpgradable(t, diskConfig(t.TempDir(), ""))
	proxyURL, _ := url.Parse("http://" + u.proxy)
	cl := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 10 * time.Second}
	var paths []string
	var sizes []int
	for i := range 50 {
		paths = append(paths, fmt.Sprintf("/u/%d", i))
		sizes = append(sizes, 1000+i*20000)
	}
	fetchAll(t, cl, o.addr, paths, sizes)
	stats := func() cacheStats {
		var s cacheStats
		(&testbed.Peerd{Admin: u.admin}).AdminJSON("/cache", &s)
		return s
	}
	waitFor(t, "50 objects on disk", 10*time.Second, func() bool { return stats().DiskObjects == 50 })
	old := u.cmd.Process.Pid
	u.cmd.Process.Signal(syscall.SIGUSR2)
	waitFor(t, "the new process serving", 40*time.Second, func() bool { return u.servingPID() != old && u.servingPID() > 0 })
	<-u.exited
	waitFor(t, "the store taken over", 20*time.Second, func() bool { s := stats(); return !s.IndexLoading && s.DiskObjects == 50 })
	if hits := fetchAll(t, cl, o.addr, paths, sizes); hits != len(paths) {
		t.Fatalf("after the upgrade: %d hits of %d", hits, len(paths))
	}
	for _, p := range paths {
		if n := o.requests(p); n != 1 {
			t.Fatalf("the origin saw %d requests for %s", n, p)
		}
	}
}

// TestDiskCacheCollapsesLargeObject: concurrent requests for an object
// larger than max_object_in_memory are one request to the origin; the
// others read the disk copy as it is written.
func TestDiskCacheCollapsesLargeObject(t *testing.T) {
	t.Parallel()
	const size = 4 << 20
	var requests atomic.Int32
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			// The head comes late, so that every client has asked by then
			// (as TestCollapsedForwarding's parent does).
			time.Sleep(300 * time.Millisecond)
		}
		b := objectBody("/iso", size)
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		for p := b; len(p) > 0; p = p[min(len(p), 256<<10):] {
			w.Write(p[:min(len(p), 256<<10)])
			w.(http.Flusher).Flush()
		}
	})
	p := startPeerd(t, diskConfig(t.TempDir(), ""))
	const clients = 8
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := p.client().Get("http://" + origin + "/iso")
			if err != nil {
				errs <- err
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || !bytes.Equal(b, objectBody("/iso", size)) {
				errs <- fmt.Errorf("%d bytes, %v", len(b), err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("the origin saw %d requests for one large object", n)
	}
}

// wchar is the bytes a process has written with write(2) and its kin
// (/proc/PID/io), whatever the file system under them.
func wchar(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		t.Skipf("no /proc/PID/io: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "wchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no wchar in /proc/PID/io")
	return 0
}

// TestDiskCacheRevalidationWritesNoBody: 20 revalidations of a stored
// 16 MiB object (each a 304) write its head, never its body again: peerd
// writes less than one body's worth to disk in all.
func TestDiskCacheRevalidationWritesNoBody(t *testing.T) {
	t.Parallel()
	const size = 16 << 20
	body := objectBody("/reval", size)
	var n atomic.Int64
	origin := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		k := n.Add(1)
		w.Header().Set("Cache-Control", "max-age=0")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("X-Revalidation", strconv.FormatInt(k, 10))
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.Write(body)
	})
	dir := t.TempDir()
	p := startPeerd(t, diskConfig(dir, "max_object_in_memory = \"1MiB\"\n"))
	get := func() *http.Response {
		t.Helper()
		resp, err := p.client().Get("http://" + origin + "/reval")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !bytes.Equal(b, body) {
			t.Fatalf("%d bytes, not the object", len(b))
		}
		return resp
	}
	get()
	waitFor(t, "the object on disk", 30*time.Second, func() bool { return p.cacheStats().DiskObjects == 1 })
	before := wchar(t, p.Cmd.Process.Pid)
	for i := 0; i < 20; i++ {
		if resp := get(); !strings.Contains(resp.Header.Get("Cache-Status"), "fwd=stale") {
			t.Fatalf("revalidation %d: Cache-Status %q; want a revalidated hit", i, resp.Header.Get("Cache-Status"))
		}
	}
	// The 20 client bodies go out with write(2) too: what peerd wrote
	// beyond them is its disk's.
	disk := wchar(t, p.Cmd.Process.Pid) - before - 20*size
	t.Logf("20 revalidations of a 16 MiB object: %d bytes written beyond the client's", disk)
	if disk > size {
		t.Fatalf("20 revalidations wrote %d bytes to disk; want the heads only (under one body, %d)", disk, size)
	}
}

// TestDiskOnlyNotClaimedStored: a response kept in memory says "stored"
// in its Cache-Status; one that goes to disk only does not (its commit
// comes after the head is sent, and may fail), and is a hit next time.
func TestDiskOnlyNotClaimedStored(t *testing.T) {
	t.Parallel()
	o := newDiskOrigin(t)
	p := startPeerd(t, diskConfig(t.TempDir(), "max_object_in_memory = \"64KiB\"\n"))
	for _, tc := range []struct {
		path   string
		size   int
		stored bool
	}{{"/o/small?size=1000", 1000, true}, {"/o/large?size=1000000", 1000000, false}} {
		resp, err := p.client().Get("http://" + o.addr + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if cs := resp.Header.Get("Cache-Status"); strings.Contains(cs, "stored") != tc.stored {
			t.Fatalf("%s: Cache-Status %q; want stored %v", tc.path, cs, tc.stored)
		}
	}
	waitFor(t, "both on disk", 10*time.Second, func() bool { return p.cacheStats().DiskObjects == 2 })
	resp, err := p.client().Get("http://" + o.addr + "/o/large?size=1000000")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if cs := resp.Header.Get("Cache-Status"); !strings.Contains(cs, "hit") {
		t.Fatalf("the large object again: Cache-Status %q; want a hit", cs)
	}
}
