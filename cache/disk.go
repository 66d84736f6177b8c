package cache

// This file holds the disk store ([cache] disk, contract section 17): one
// file per object under objects/, an append-only journal that is the
// index, a lock file that keeps a second peerd out, CLOCK eviction over
// the bytes on disk, and the pause that a full or failing disk puts
// the store in.
//
// An object becomes visible in two steps, the second after the first is
// done: its file is written whole under objects/ (head, body, checksums),
// and a 48-byte record naming it is appended to the journal. A process
// that dies at any point leaves either a file the journal does not name
// (swept at the next start) or a named file that checks out. A power
// loss may lose what the kernel had not written back; what it tears is
// found by the checksums when read, and dropped.

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
)

// keyHash names a primary key on disk: the first 8 bytes of its SHA-256
// (the journal's records have room for 16, and were written with 16
// before the index was made smaller: the rest is not read). Keys sharing
// a hash are told apart by the key in each object's head, which a
// lookup compares with the request's.
type keyHash [8]byte

func hashKey(key []byte) keyHash {
	s := sha256.Sum256(key)
	return keyHash(s[:8])
}

// secHash names a variant of a key on disk (its Vary selecting values):
// the low 32 bits of the first 8 bytes of their SHA-256, which is what
// the journal's records held before the index was made smaller; every
// variant read is matched against the request's own values.
type secHash uint32

func hashSecondary(s string) secHash {
	h := sha256.Sum256([]byte(s))
	return secHash(binary.BigEndian.Uint64(h[:8]))
}

// diskEntry is one stored object in the index: 32 bytes, no pointers
// (diskslab.go).
type diskEntry struct {
	key keyHash
	id  uint64 // 0: a free slot
	// sg is the object file's bytes, and its head file's (the low
	// sizeBits), and its head generation (the high 24): gen > 0 says the
	// object's head is the one in its head file of that generation (a
	// 304 refreshed it), not the one in its object file.
	sg  uint64
	sec secHash
	sib slot // the next (newer) variant of the same key; a free slot's next free one
}

// sizeBits is the bits of an entry's size: at most maxEntrySize.
const sizeBits = 40

func (e diskEntry) size() int64 { return int64(e.sg & (1<<sizeBits - 1)) }
func (e diskEntry) gen() uint32 { return uint32(e.sg >> sizeBits) }

// setSize sets the entry's size (at most maxEntrySize).
func (e *diskEntry) setSize(n int64) { e.sg = e.sg&^(1<<sizeBits-1) | uint64(n)&(1<<sizeBits-1) }

// setGen sets the entry's head generation (at most maxGen).
func (e *diskEntry) setGen(g uint32) { e.sg = e.sg&(1<<sizeBits-1) | uint64(g)<<sizeBits }

// disk is the disk store.
type disk struct {
	dir string
	log logrus.FieldLogger

	lock *os.File

	mu       sync.Mutex
	ix       diskIndex // the entries, by key, in CLOCK order (diskslab.go)
	capacity int64
	bytes    int64
	objects  int
	journal  *os.File
	jsize    int64 // the journal's length: where the next record goes
	records  int64 // records in the journal
	// While the index loads, every record the loader reads was written
	// by an earlier process, so it is older than anything done since the
	// start, whatever the ids say (they come from the clock, which may
	// have been set back between runs). tomb: keys purged since the
	// start; the loader drops their records. newer: entries committed
	// since the start; the loader drops records of the same variant.
	tomb  map[keyHash]struct{}
	newer map[slot]struct{}
	// fresh: the objects whose heads a 304 refreshed (or is refreshing)
	// since the load ended, for the sweep not to take the new head
	// file for a dead one (disksweep.go); nil once the sweep is done.
	fresh   map[uint64]struct{}
	closing bool // close has begun: no new writers, the loader stops
	closed  bool // the journal is closed
	whole   bool // the index holds the whole journal: close writes its image (diskimage.go)
	// fromImage: the index was read from its image, not the journal.
	fromImage bool

	// The segments of small objects (diskseg.go): their figures, the
	// bytes in them no entry names (counted against disk_size beside
	// the live bytes), the next one's number, the one being written,
	// and those reclaimed whose files are yet to be removed.
	segs      map[uint32]*segment
	dead      int64
	segNext   uint32
	segActive uint32
	segFile   *os.File // the segment being written (nil: none yet)
	segGone   []uint32
	segReady  atomic.Bool // the index is loaded: small objects go to segments
	// segQ hands records to the appender (diskappend.go), which runs
	// from the load's end (appenderOn) to the store's close.
	segQ         chan *segAppend
	appenderOn   bool
	appenderDone chan struct{}

	nextID atomic.Uint64
	// idsFrom is where this process's ids start (they are above it): set
	// before any is issued, so the sweep never takes one of this
	// process's files for an earlier process's.
	idsFrom uint64
	loading atomic.Bool
	loaded  atomic.Int64

	fsync       atomic.Bool  // disk_fsync
	pausedUntil atomic.Int64 // Unix nanoseconds; 0: storing
	noJournal   atomic.Bool  // the journal could not be opened: not storing
	errors      atomic.Int64
	hits        atomic.Int64

	writers sync.WaitGroup
	// owning is the copying of the image's chunks into the process's
	// own memory once the index is loaded (diskimageload.go).
	owning sync.WaitGroup
	stop   chan struct{}
	open   fdCache // files of disk-only objects being served
	// ready is closed when the index is loaded (or loading was given up),
	// swept when leftover files are removed.
	ready, swept chan struct{}
	// journalOpen is closed once the journal takes records (or loading
	// was given up): a commit that comes sooner waits for it, as it may
	// in the first moments after start or while an upgrade's old process
	// still holds the store.
	journalOpen     chan struct{}
	journalOpenOnce sync.Once
}

// journalOpened closes journalOpen, once.
func (d *disk) journalOpened() { d.journalOpenOnce.Do(func() { close(d.journalOpen) }) }

// pauseFor is how long a disk fault stops the store from taking objects.
const pauseFor = 10 * time.Second

// errLocked is a disk directory another peerd holds.
var errLocked = errors.New("in use by another peerd")

// openDisk opens (or creates) the store in dir and starts loading its
// index in the background. With wait, a store another process holds (the
// old peerd of a binary upgrade) is taken over once it lets go; without,
// it is an error that says who holds it.
func openDisk(dir string, capacity int64, log logrus.FieldLogger, wait bool) (*disk, error) {
	// The directory itself is the operator's (it may be a link to
	// another disk); nothing under it is followed. It is made when it is
	// missing (mode 0750), never its parents.
	if err := os.Mkdir(dir, 0o750); err == nil {
		log.WithField("disk", dir).Warn("cache disk: made the store's directory (mode 0750)")
	} else if !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("cache disk %s: %w", dir, err)
	}
	if err := plainDir(filepath.Join(dir, "objects")); err != nil {
		return nil, fmt.Errorf("cache disk %s: %w", dir, err)
	}
	lock, err := openNoFollow(filepath.Join(dir, "LOCK"), os.O_RDWR|os.O_CREATE)
	if err == nil {
		if st, serr := lock.Stat(); serr != nil || !st.Mode().IsRegular() {
			lock.Close()
			lock, err = nil, fmt.Errorf("LOCK is not a regular file")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cache disk %s: %w", dir, err)
	}
	d := &disk{dir: dir, log: log, lock: lock, tomb: map[keyHash]struct{}{},
		newer: map[slot]struct{}{}, segs: map[uint32]*segment{}, segNext: 1,
		segQ: make(chan *segAppend, 256), appenderDone: make(chan struct{}),
		capacity: capacity, stop: make(chan struct{}), ready: make(chan struct{}), swept: make(chan struct{}),
		journalOpen: make(chan struct{})}
	d.idsFrom = uint64(time.Now().UnixNano())
	d.nextID.Store(d.idsFrom)
	d.loading.Store(true)
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if !wait {
			holder, _ := os.ReadFile(lock.Name())
			lock.Close()
			return nil, fmt.Errorf("cache disk %s: %w (pid %s holds %s); two peerd processes cannot share a disk store", dir, errLocked, trimPID(holder), lock.Name())
		}
		go d.waitLock()
		return d, nil
	}
	go d.start()
	return d, nil
}

func trimPID(b []byte) string {
	n, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil {
		return "unknown"
	}
	return strconv.Itoa(n)
}

// waitLock takes the lock over from the process that holds it (an
// upgrade's old peerd lets go when it hands over).
func (d *disk) waitLock() {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			d.loading.Store(false)
			d.journalOpened()
			close(d.ready)
			close(d.swept)
			return
		case <-t.C:
		}
		if syscall.Flock(int(d.lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			d.start()
			return
		}
	}
}

// start runs once the lock is held: the pid is recorded and the index is
// loaded (then the files of unfinished writes are swept).
func (d *disk) start() {
	d.checkObjectDirs()
	d.lock.Truncate(0)
	d.lock.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	if err := d.listSegments(); err != nil {
		d.log.WithError(err).WithField("disk", d.dir).Warn("cache disk: cannot list the segments; the small objects in them are not loaded")
		d.errors.Add(1)
	}
	d.load()
}

func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// objectPath is where object id lives.
func (d *disk) objectPath(id uint64) string {
	return filepath.Join(d.dir, "objects", fmt.Sprintf("%02x", id&0xff), strconv.FormatUint(id, 16))
}

// headPath is where generation gen of object id's refreshed head lives.
func (d *disk) headPath(id uint64, gen uint32) string {
	return d.objectPath(id) + "." + strconv.FormatUint(uint64(gen), 16)
}

// Journal records.
const (
	recordSize = 48
	opAdd      = 1
	opDel      = 2
	// opHead: the object's head is now the one in its head file of the
	// record's generation (bytes 1-3), and its size is the record's.
	opHead     = 3
	journalHdr = "PEERDJ1\n"
	// maxGen is the largest head generation (24 bits); the next wraps
	// to 1.
	maxGen = 1<<24 - 1
	// maxEntrySize bounds a record's size: nothing a journal names is
	// larger (1 TiB less a byte, what an entry holds), so no sum of sizes
	// overflows the byte count; a larger object is not stored on disk.
	maxEntrySize = 1<<sizeBits - 1
)

func appendRecord(b []byte, op byte, e *diskEntry) []byte {
	start := len(b)
	var g uint32
	if op == opHead {
		g = e.gen()
	}
	b = append(b, op, byte(g>>16), byte(g>>8), byte(g))
	b = append(b, e.key[:]...)
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0) // the key's room is 16 bytes
	b = binary.BigEndian.AppendUint64(b, e.id)
	b = binary.BigEndian.AppendUint64(b, uint64(e.size()))
	b = binary.BigEndian.AppendUint64(b, uint64(e.sec))
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// parseRecord reads one record; ok false for a torn or foreign one.
func parseRecord(b []byte) (op byte, e diskEntry, ok bool) {
	if len(b) < recordSize || crc32.Checksum(b[:44], castagnoli) != binary.BigEndian.Uint32(b[44:]) {
		return 0, e, false
	}
	op = b[0]
	copy(e.key[:], b[4:12])
	e.id = binary.BigEndian.Uint64(b[20:])
	size := binary.BigEndian.Uint64(b[28:])
	e.sec = secHash(binary.BigEndian.Uint64(b[36:]))
	g := uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	switch {
	case e.id == 0 || size > maxEntrySize:
		return 0, e, false
	case op == opHead && g != 0:
		e.setGen(g)
	case (op == opAdd || op == opDel) && g == 0:
	default:
		return 0, e, false
	}
	e.setSize(int64(size))
	return op, e, true
}

// appendLocked writes records to the journal in one write.
func (d *disk) appendLocked(rec []byte) error {
	if d.journal == nil {
		return errors.New("journal not open")
	}
	if _, err := d.journal.Write(rec); err != nil {
		// A short write (a full disk) would shift every later record off
		// its boundary: cut it off.
		d.journal.Truncate(d.jsize)
		return err
	}
	d.jsize += int64(len(rec))
	d.records += int64(len(rec) / recordSize)
	return nil
}

// resize changes disk_size, evicting at once when it shrank.
func (d *disk) resize(capacity int64) {
	d.mu.Lock()
	d.capacity = capacity
	var victims []diskEntry
	if !d.loading.Load() {
		victims = d.evictLocked()
	}
	d.mu.Unlock()
	d.forget(victims)
}

// storing reports whether the store takes new objects now: not while a
// fault pauses it (the first call after the pause says it resumes).
func (d *disk) storing() bool {
	if d.noJournal.Load() {
		return false
	}
	until := d.pausedUntil.Load()
	if until == 0 {
		return true
	}
	if time.Now().UnixNano() < until {
		return false
	}
	if d.pausedUntil.CompareAndSwap(until, 0) {
		d.log.WithField("disk", d.dir).Warn("cache disk: storing objects again")
	}
	return true
}

// fault counts a disk error; a write fault pauses the store (logged once
// for the pause).
func (d *disk) fault(what string, err error) {
	d.errors.Add(1)
	if what == "read" {
		d.log.WithError(err).WithField("disk", d.dir).Debug("cache disk: a stored object could not be read; dropped")
		return
	}
	until := time.Now().Add(pauseFor).UnixNano()
	for {
		cur := d.pausedUntil.Load()
		if cur != 0 && cur > time.Now().UnixNano() {
			return // paused already, and said so
		}
		if d.pausedUntil.CompareAndSwap(cur, until) {
			break
		}
	}
	d.log.WithError(err).WithFields(logrus.Fields{"disk": d.dir, "during": what, "retry_in": pauseFor.String()}).
		Warn("cache disk: stopped storing objects; hits from memory and relaying go on")
}

// close stops the store: objects whose whole body has arrived are
// committed, writes still receiving theirs are given up, and the journal
// and the lock are released (the next process may take them).
func (d *disk) close() {
	d.mu.Lock()
	if d.closing {
		d.mu.Unlock()
		return
	}
	d.closing = true
	close(d.stop)
	d.mu.Unlock()
	d.writers.Wait()
	close(d.segQ) // no writer is left to hand it a record
	if d.appenderOn {
		<-d.appenderDone
	}
	// The sweep stops at its next directory: once the store is let go,
	// a sweep still running would delete the files of the process that
	// takes it next (an upgrade's new peerd, a restart).
	<-d.swept
	d.owning.Wait()
	d.removeSegments() // (the image names the segments that stay)
	d.open.closeAll()
	d.mu.Lock()
	d.closed = true
	if d.segFile != nil {
		d.segFile.Close()
		d.segFile = nil
	}
	if d.journal != nil && d.whole {
		if err := d.writeImageLocked(); err != nil {
			d.log.WithError(err).WithField("disk", d.dir).Warn("cache disk: cannot write the index image; the next start reads the journal")
		}
	}
	if d.journal != nil {
		d.journal.Close()
		d.journal = nil
	}
	d.mu.Unlock()
	d.lock.Close()
}

// diskStats are the store's figures for GET /cache.
type diskStats struct {
	objects, bytes, capacity, hits, errors, loaded int64
	loading                                        bool
}

func (d *disk) stats() diskStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return diskStats{objects: int64(d.objects), bytes: d.bytes, capacity: d.capacity, hits: d.hits.Load(),
		errors: d.errors.Load(), loaded: d.loaded.Load(), loading: d.loading.Load()}
}
