package cache

// This file holds the two tiers together: opening and closing the disk
// tier, a lookup that falls through from memory to disk, the promotion of
// what the disk holds into memory, and the reading of a disk-only body
// while it is served, a checked block at a time.

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
)

// Options are what opening a cache needs beyond its Config.
type Options struct {
	Log logrus.FieldLogger
	// TakeOver: the disk store may be held by the process this one
	// replaces (a binary upgrade); wait for it instead of failing.
	TakeOver bool
}

// Open returns the cache of cfg with its disk tier when cfg.Disk is set
// (its index loads in the background); nil when the cache is off. The
// error says why a disk store could not be opened (another peerd holds
// it, a directory that cannot be made).
func Open(cfg Config, opt Options) (*Cache, error) {
	c := New(cfg)
	if c == nil || cfg.Disk == "" {
		return c, nil
	}
	log := opt.Log
	if log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		log = l
	}
	d, err := openDisk(cfg.Disk, int64(cfg.DiskSize), log, opt.TakeOver)
	if err != nil {
		return nil, err
	}
	c.disk = d
	return c.Reconfigured(cfg), nil
}

// Close stops the disk tier, for every view of the stores: writes in
// progress are given up and the store is let go (a next process may open
// it). The memory tier stays.
func (c *Cache) Close() {
	if c != nil && c.disk != nil {
		c.disk.close()
	}
}

// Find looks r up in memory, then on disk: the object, the verdict, and
// whether its body is read from disk (a disk hit).
func (c *Cache) Find(r *Request, now time.Time) (*Object, Verdict, bool) {
	o, n := c.store.get(r.Key, r)
	fromDisk := false
	switch {
	case c.disk == nil:
	case o == nil && n == 0:
		o, n = c.fromDisk(r)
		fromDisk = o != nil
	case o != nil && o.diskHits.Add(1)&15 == 1:
		// The disk's LRU hears of hits in memory too (sampled), so that
		// what is hot there survives its eviction and a restart.
		c.disk.touch(hashKey(r.Key), hashSecondary(o.secondary))
	}
	switch {
	case o != nil && o.freshFor(r, now.UnixNano()) && !c.refreshIMS(r):
		return o, Hit, fromDisk || o.disk != nil
	case o != nil:
		return o, Stale, fromDisk || o.disk != nil
	case n > 0:
		return nil, VaryMiss, false
	}
	return nil, Miss, false
}

// refreshIMS reports a conditional request whose URL's refresh pattern
// says to check with the next hop even when the stored response is fresh
// (Squid refresh-ims): the first pattern that matches decides.
func (c *Cache) refreshIMS(r *Request) bool {
	st := c.cfg()
	if !r.Conditional || !st.refreshIMS {
		return false
	}
	for i := range st.refresh {
		if p := &st.refresh[i]; p.re.Match(r.Key) {
			return p.ims
		}
	}
	return false
}

// fromDisk reads the heads of key's variants on disk into memory and
// returns the one that answers r (its body too, from the same open file,
// when it fits the memory tier) and how many variants there are.
func (c *Cache) fromDisk(r *Request) (*Object, int) {
	d := c.disk
	k := hashKey(r.Key)
	es := d.lookup(k)
	if len(es) == 0 {
		return nil, 0
	}
	var found, part *Object
	n := 0
	maxInMemory := c.cfg().maxInMemory
	// answers: the variant found is read whole when its body fits.
	answers := func(o *Object, bodyLen int64) bool {
		return found == nil && !o.partial && bodyLen <= maxInMemory && o.Key == string(r.Key) && o.matches(r)
	}
	for _, e := range es {
		o, err := c.readEntry(e, answers)
		if err != nil {
			continue
		}
		if o.Key != string(r.Key) {
			continue // another key with the same hash
		}
		n++
		switch {
		case !o.matches(r):
		case !o.partial && found == nil:
			found = o
			continue
		case o.partial && part == nil && r.Range != nil && o.covers(r):
			part = o
			continue
		}
		c.store.put(o)
	}
	if found == nil && part != nil && part.disk.bodyLen <= maxInMemory {
		// Only a stored part answers: it too is kept whole in memory.
		if whole, err := c.readEntry(diskEntry{key: k, id: part.disk.id}, func(*Object, int64) bool { return true }); err == nil {
			part = whole
		}
	}
	if found == nil {
		found = part
	} else if part != nil {
		c.store.put(part)
	}
	if found == nil {
		return nil, n
	}
	c.store.put(found)
	d.touch(k, hashSecondary(found.secondary))
	return found, n
}

func (o *Object) diskID() uint64 {
	switch {
	case o.disk != nil:
		return o.disk.id
	case o.loadedFrom != 0:
		return o.loadedFrom
	}
	return o.committed.Load()
}

// readEntry reads an entry's file: its head (from its head file when a
// 304 refreshed it), and the body into memory when body says so for that
// head (else the object is disk-only). A file that does not check out, or
// is gone, is dropped; one that cannot be opened now (too many open
// files, a permission) is a miss and is kept.
func (c *Cache) readEntry(e diskEntry, body func(o *Object, bodyLen int64) bool) (*Object, error) {
	d := c.disk
	f, base, size, release, err := d.openObject(e.id)
	if err != nil {
		if gone(err) || errors.Is(err, errCorrupt) {
			d.remove(e.key, e.id)
		}
		d.fault("read", err)
		return nil, err
	}
	defer release()
	o, ref, err := readObjectAt(f, base, size)
	if err == nil && e.gen() > 0 {
		var fresh *Object
		if fresh, err = readHeadFile(d.headPath(e.id, e.gen()), ref.bodyLen); err == nil && (fresh.Key != o.Key || fresh.secondary != o.secondary) {
			err = errCorrupt
		}
		o = fresh
	}
	if err != nil && !gone(err) && !errors.Is(err, errCorrupt) {
		d.fault("read", err) // a transient failure: kept, a miss now
		return nil, err
	}
	whole := err == nil && body(o, ref.bodyLen)
	if whole {
		o.Body, err = ref.readBody(f)
	}
	if err != nil {
		d.remove(e.key, e.id)
		d.fault("read", err)
		return nil, err
	}
	ref.c, ref.id = c, e.id
	if whole {
		o.loadedFrom = e.id
	} else {
		o.disk = ref
	}
	o.Size = o.sizeWith(int64(len(o.Body)))
	return o, nil
}

// headCopy is a copy of o's head and freshness, without its body or
// store bookkeeping.
func (o *Object) headCopy() *Object {
	return &Object{
		Key: o.Key, secondary: o.secondary, Status: o.Status, reason: o.reason, fields: o.fields,
		partial: o.partial, first: o.first, total: o.total,
		requestTime: o.requestTime, responseTime: o.responseTime, dateValue: o.dateValue, ageValue: o.ageValue,
		lifetime: o.lifetime, flags: o.flags, swr: o.swr, sie: o.sie,
		etag: o.etag, lastModRaw: o.lastModRaw, lastModified: o.lastModified, vary: o.vary, varyValues: o.varyValues,
		contentLang: o.contentLang, contentType: o.contentType,
	}
}

// OnDisk reports whether o's body is read from disk when it is served.
func (o *Object) OnDisk() bool { return o.disk != nil }

// bodyLen is the stored body's length.
func (o *Object) bodyLen() int64 {
	if o.disk != nil {
		return o.disk.bodyLen
	}
	return int64(len(o.Body))
}

// Drop removes o from both tiers (its disk file did not check out).
func (c *Cache) Drop(o *Object) {
	c.store.remove(o)
	if c.disk != nil {
		if id := o.diskID(); id != 0 {
			c.disk.remove(hashKey([]byte(o.Key)), id)
		}
	}
}

// BodyReader serves a disk-only object's body, checking every block
// before a byte of it is written.
type BodyReader struct {
	o   *Object
	of  *openFile
	f   *os.File
	buf *[]byte
	// first is block 0, read and checked when the body was opened (a
	// small body is then served without reading it again).
	first []byte
}

// ErrStoredBroken is a stored body that did not check out while it was
// served: the object is dropped and the client's connection must close.
var ErrStoredBroken = errors.New("a stored body did not check out")

// gone reports an error that says a stored file is not there (or is a
// link, which is never followed): the object is dropped. Others (too
// many open files, a permission) are passing, and the file is kept.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.ENOTDIR)
}

// OpenBody opens a disk-only object's body; an error means it cannot be
// served now (answer as a miss): gone or not checking out, it was
// dropped; a passing failure (too many open files) keeps it.
func (o *Object) OpenBody() (*BodyReader, error) {
	ref := o.disk
	d := ref.c.disk
	of, err := d.openBody(ref.id)
	if err != nil {
		if gone(err) {
			ref.c.Drop(o)
		}
		d.fault("read", err)
		return nil, err
	}
	f := of.f
	br := &BodyReader{o: o, of: of, f: f, buf: chunkPool.Get().(*[]byte)}
	if ref.bodyLen > 0 {
		// The first block is checked before anything is answered.
		p, err := ref.readBlock(f, 0, *br.buf)
		if err != nil {
			br.Close()
			d.fault("read", err)
			ref.c.Drop(o)
			return nil, err
		}
		br.first = p
	}
	return br, nil
}

// WriteRange writes body bytes first to last (body positions) to w. An
// error from the disk drops the object and is ErrStoredBroken; an error
// from w is returned as it is.
func (br *BodyReader) WriteRange(w io.Writer, first, last int64) (int64, error) {
	ref := br.o.disk
	var n int64
	for off := first; off <= last; {
		i := off / blockSize
		p, err := br.first, error(nil)
		if i != 0 || p == nil {
			p, err = ref.readBlock(br.f, i, *br.buf)
			br.first = nil // buf now holds another block
		}
		if err != nil {
			ref.c.disk.fault("read", err)
			ref.c.Drop(br.o)
			return n, ErrStoredBroken
		}
		p = p[off-i*blockSize : min(int64(len(p)), last-i*blockSize+1)]
		k, err := w.Write(p)
		n += int64(k)
		if err != nil {
			return n, err
		}
		off += int64(len(p))
	}
	return n, nil
}

// Close releases the reader.
func (br *BodyReader) Close() {
	if br.of != nil {
		br.o.disk.c.disk.open.put(br.of)
		br.of = nil
	}
	if br.buf != nil {
		chunkPool.Put(br.buf)
		br.buf = nil
	}
}

// Serves reports whether br reads o's body (a refreshed object reads its
// old one's file).
func (br *BodyReader) Serves(o *Object) bool { return o.disk != nil && o.disk.id == br.o.disk.id }

// BodyStream reads an object's body from an offset as it arrives: from
// memory, or from the file of a disk-only object its writer is still
// writing (collapsed requests follow a large download that way).
type BodyStream struct {
	o    *Object
	f    *os.File
	base int64 // where the object's file starts in f
	buf  *[]byte
}

// FromDiskWriter reports an object whose body is read from the file its
// disk writer is still writing (use a BodyStream).
func (o *Object) FromDiskWriter() bool { return o.stream != nil && o.stream.disk != nil }

// NewBodyStream starts reading o's body; Close it when done.
func (o *Object) NewBodyStream() *BodyStream { return &BodyStream{o: o} }

// Next returns the body bytes from off that have arrived, waiting for
// more while the response is still arriving; done reports the end of the
// body and failed a body that broke off (or could not be read).
func (b *BodyStream) Next(off int64) (p []byte, done, failed bool) {
	s := b.o.stream
	if s == nil || s.disk == nil {
		return b.o.Stream(off)
	}
	s.mu.Lock()
	for s.n <= off && !s.done && !s.failed {
		s.cond.Wait()
	}
	n, done, failed := s.n, s.done, s.failed
	s.mu.Unlock()
	if off >= n || failed {
		return nil, done, failed
	}
	w := s.disk
	if b.f == nil {
		// The writer's file, or its segment once the record is written
		// (a small object's followers hear of it only then).
		path, base := w.d.objectPath(w.e.id), int64(0)
		if isSeg(w.e.id) {
			path, base = w.d.segPath(segNo(w.e.id)), segOff(w.e.id)+segHeader
		}
		f, err := openNoFollow(path, os.O_RDONLY)
		if err != nil {
			return nil, false, true
		}
		b.f, b.base, b.buf = f, base, chunkPool.Get().(*[]byte)
	}
	k := min(n-off, int64(len(*b.buf)))
	p = (*b.buf)[:k]
	if _, err := b.f.ReadAt(p, b.base+bodyOffset(int64(len(w.head)))+off); err != nil {
		return nil, false, true
	}
	return p, done && off+k >= n, false
}

// Close releases the stream.
func (b *BodyStream) Close() {
	if b.f != nil {
		b.f.Close()
		chunkPool.Put(b.buf)
		b.f, b.buf = nil, nil
	}
}

// maxRefreshCopy bounds the body copied to disk for a refreshed object
// that the disk does not hold yet: a larger one is stored at its next
// miss.
const maxRefreshCopy = 16 << 20

// persistRefresh keeps a refreshed object's new head (a 304 merged into
// it) on disk, so that its new freshness survives a restart. When the
// disk holds the object, only the head is written (a head file, see
// diskhead.go): its body is what it was. When it does not (its store was
// paused, or its write had not committed), the object is written whole,
// up to maxRefreshCopy. It runs behind the request.
func (c *Cache) persistRefresh(o *Object) {
	d := c.disk
	if d == nil {
		return
	}
	// Only the object's own disk copy, by its id, takes its new head: the
	// variant's entry may hold another version (an older one whose
	// replacement never committed), and a head written over its body
	// would be one version's validator over another's bytes.
	key, sec := hashKey([]byte(o.Key)), hashSecondary(o.secondary)
	var id uint64
	if want := o.diskID(); want != 0 {
		d.mu.Lock()
		if x := d.entryLocked(key, sec, want); x != nil {
			id = x.id
		}
		d.mu.Unlock()
	}
	if id != 0 {
		if d.beginWrite() {
			go d.refreshHead(o, key, sec, id, o.bodyLen())
		}
		return
	}
	if o.partial || o.disk != nil || o.bodyLen() > maxRefreshCopy {
		return
	}
	if dw := d.startWriter(o, c, o.bodyLen()); dw != nil {
		go func() {
			if dw.write(o.Body) {
				dw.finish(nil, false)
			}
		}()
	}
}

// forgetOnDisk drops o's variant from the disk (a refresh said no-store).
func (c *Cache) forgetOnDisk(o *Object) {
	if c.disk == nil {
		return
	}
	d, sec := c.disk, hashSecondary(o.secondary)
	d.mu.Lock()
	es := d.dropWhereLocked(hashKey([]byte(o.Key)), func(e *diskEntry) bool { return e.sec == sec })
	d.mu.Unlock()
	d.forget(es)
}
