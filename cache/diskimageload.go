package cache

// This file holds the reading of the index image (diskimage.go): its
// pieces are read (the table) or mapped (the slab's chunks) and checked
// by a goroutine per core into a new index, which then takes the place
// of what was stored since the start (that goes back into it, newer than
// anything in the image); then the chunks are copied from their mapping
// into the process's own memory, in the background.

import (
	"errors"
	"fmt"
	"hash/crc32"
	"math/bits"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// imageSum is what the checks of the pieces add up.
type imageSum struct {
	heads   uint64 // the mix of every entry's slot and fingerprint (less the links' targets, later)
	table   uint64 // the mix of every table value
	taken   int    // table values
	entries int    // entries in use
	free    int    // free entries
	links   []slot // the entries whose sib names the next variant
	objects int
	bytes   int64
	segs    map[uint32]imageSeg // per segment: its entries (count) and their bytes (live)
}

func (s *imageSum) add(o *imageSum) {
	s.heads += o.heads
	s.table += o.table
	s.taken += o.taken
	s.entries += o.entries
	s.free += o.free
	s.links = append(s.links, o.links...)
	s.objects += o.objects
	s.bytes += o.bytes
	for no, g := range o.segs {
		if s.segs == nil {
			s.segs = map[uint32]imageSeg{}
		}
		t := s.segs[no]
		t.count += g.count
		t.live += g.live
		s.segs[no] = t
	}
}

// mix spreads a table value over 64 bits (splitmix64's finalizer), for
// the sums that compare the table with the chains' first entries.
func mix(v slot) uint64 {
	z := uint64(v) + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// loadImage reads the image in f (header h, hlen bytes) into the index;
// the journal it stands for is records bytes past its header.
func (d *disk) loadImage(f *os.File, h *imageHeader, hlen int64, records int64) error {
	x, segs, sum, err := d.readImage(f, h, hlen)
	if err != nil {
		return err
	}
	var victims []diskEntry
	d.mu.Lock()
	if d.closing {
		d.mu.Unlock()
		unmapChunks(x)
		return errImageClosing
	}
	d.owning.Add(1)
	go d.ownChunks(len(x.chunks))
	// What was stored since the start is newer than the image's.
	var since []diskEntry
	d.ix.each(func(_ slot, e *diskEntry) { since = append(since, *e) })
	d.ix, d.bytes, d.objects = *x, sum.bytes, sum.objects
	d.dead = 0
	for no, s := range d.segs {
		is := segs[no]
		s.live, s.count = int64(is.live), int(is.count)
		d.dead += s.alloc - s.live
	}
	d.segNext = max(d.segNext, uint32(h.segNext))
	d.records += records / recordSize
	for _, e := range since {
		_, dropped := d.insertLocked(e)
		victims = append(victims, dropped...)
	}
	for k := range d.tomb {
		victims = append(victims, d.dropWhereLocked(k, func(*diskEntry) bool { return true })...)
	}
	d.loaded.Store(int64(d.objects))
	d.mu.Unlock()
	d.forget(victims)
	return nil
}

// readImage reads and checks the image's body into a new index.
func (d *disk) readImage(f *os.File, h *imageHeader, hlen int64) (*diskIndex, map[uint32]imageSeg, *imageSum, error) {
	nchunks := (h.used + chunkLen - 1) / chunkLen
	switch {
	case h.order != imageOrder || h.entry != uint64(entrySize) || h.chunk != chunkLen:
		return nil, nil, nil, errors.New("written by a build of another layout")
	case h.used > maxSlots || h.free > h.used || h.hand > h.used:
		return nil, nil, nil, fmt.Errorf("slab figures out of range (%d used, free %d, hand %d)", h.used, h.free, h.hand)
	case h.tab == 0 && (h.used > 0 || h.keys > 0), // (a store that never held an object has no table)
		h.tab != 0 && (h.tab < 1024 || h.tab > 1<<31 || bits.OnesCount64(h.tab) != 1), h.keys*5 > h.tab*4:
		return nil, nil, nil, fmt.Errorf("table of %d places for %d keys", h.tab, h.keys)
	case uint64(len(h.crcs)) != (h.tab+tablePiece-1)/tablePiece+nchunks:
		return nil, nil, nil, errors.New("pieces do not match the figures")
	}
	bodyAt := imageBodyAt(hlen)
	if st, err := f.Stat(); err != nil || st.Size() != bodyAt+int64(h.tab)*4+int64(nchunks)*chunkPieceBytes {
		return nil, nil, nil, errors.New("cut short, or longer than its figures")
	}
	segs := map[uint32]imageSeg{}
	for _, s := range h.segs {
		segs[uint32(s.no)] = s
	}
	d.mu.Lock()
	same := len(segs) == len(d.segs)
	for no, s := range d.segs {
		is, ok := segs[no]
		same = same && ok && is.alloc == uint64(s.alloc) && is.live <= is.alloc && is.count <= h.used
	}
	d.mu.Unlock()
	if !same {
		return nil, nil, nil, errors.New("its segments are not the ones on disk")
	}
	x := &diskIndex{used: int(h.used), free: slot(h.free), keys: int(h.keys), hand: int(h.hand), table: make([]slot, h.tab)}
	x.chunks, x.refs = make([][]diskEntry, nchunks), make([][]uint64, nchunks)
	tb := tableBytes(x.table)
	var tablePieces [][]byte
	for i := 0; i < len(tb); i += tablePiece * 4 {
		tablePieces = append(tablePieces, tb[i:min(i+tablePiece*4, len(tb))])
	}
	pieces := len(tablePieces) + int(nchunks)
	chunksAt := bodyAt + int64(len(tb))
	var next atomic.Int64
	var mu sync.Mutex
	var sum imageSum
	var bad error
	var wg sync.WaitGroup
	for range max(1, min(runtime.GOMAXPROCS(0), 4)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var my imageSum
			var err error
			// A page of the image the disk cannot read faults when
			// its mapping is read: an error here, not a crash.
			debug.SetPanicOnFault(true)
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("a page of it cannot be read: %v", r)
				}
				mu.Lock()
				sum.add(&my)
				bad = errors.Join(bad, err)
				mu.Unlock()
			}()
			for err == nil {
				i := int(next.Add(1) - 1)
				if i >= pieces {
					break
				}
				if i < len(tablePieces) {
					at := bodyAt + int64(i)*tablePiece*4
					if err = readPiece(f, at, tablePieces[i]); err == nil {
						err = checkPiece([][]byte{tablePieces[i]}, h.crcs[i], at)
					}
					if err == nil {
						err = my.checkTable(tablePieces[i], h.used)
					}
					continue
				}
				c := i - len(tablePieces)
				off := chunksAt + int64(c)*chunkPieceBytes
				if x.chunks[c], err = imageChunk(f, off+imagePage); err != nil {
					continue
				}
				x.refs[c] = make([]uint64, chunkLen/64)
				if err = readPiece(f, off, refsView(x.refs[c])); err == nil {
					err = checkPiece([][]byte{refsView(x.refs[c]), piecePad, chunkView(x.chunks[c])}, h.crcs[i], off)
				}
				if err == nil {
					err = my.checkChunk(x, c, segs)
				}
			}
		}()
	}
	wg.Wait()
	err := bad
	if err == nil {
		err = x.checkLinks(&sum)
	}
	if err == nil && (sum.taken != int(h.keys) || sum.taken != sum.entries-len(sum.links) || sum.table != sum.heads) {
		err = errors.New("the table does not name each chain's first entry once")
	}
	for no, is := range segs {
		// A segment's live bytes are its records', which a refreshed
		// head's file makes less than its entries' sizes, never more.
		if g := sum.segs[uint32(no)]; err == nil && (g.count != is.count || is.live > g.live) {
			err = fmt.Errorf("segment %d's figures (%d objects, %d bytes) do not match its entries (%d, %d)", no, is.count, is.live, g.count, g.live)
		}
	}
	if err == nil {
		if n, ok := x.freeLen(sum.free); !ok {
			err = fmt.Errorf("the free list does not hold the %d free entries (%d reached)", sum.free, n)
		}
	}
	if err != nil {
		unmapChunks(x)
		return nil, nil, nil, err
	}
	return x, segs, &sum, nil
}

// unmapChunks lets go of the chunks of an index read that is not used.
func unmapChunks(x *diskIndex) {
	for _, c := range x.chunks {
		if c != nil {
			syscall.Munmap(chunkView(c))
		}
	}
}

// ownChunks makes the first n chunks of the index the process's own
// memory, one at a time, once the index is in use: each is copied from
// its mapping of the image into new memory, and the mapping let go.
// Until then a chunk's pages are the image's, shared with the page cache
// (a write to one copies that page); after, the image's file is gone
// from the disk, and no page of the index depends on reading it again.
func (d *disk) ownChunks(n int) {
	defer d.owning.Done()
	debug.SetPanicOnFault(true)
	for c := range n {
		mem, err := mapChunk()
		if err != nil {
			d.log.WithError(err).WithField("disk", d.dir).Warn("cache disk: cannot take memory for the index; it stays mapped from its image")
			return
		}
		if old := d.ownChunk(c, mem); old != nil {
			syscall.Munmap(chunkView(old))
		} else {
			syscall.Munmap(chunkView(mem))
		}
	}
}

// ownChunk puts mem, a copy of chunk c, in its place, and returns the
// mapping it replaced (nil: the copy could not be made). The first copy
// of a mapped chunk took 0.62-0.67 ms on average here (its pages walked
// for the first time), and is made without the lock; the second, under
// it, takes what was written to the chunk meanwhile, in 14-16 µs.
func (d *disk) ownChunk(c int, mem []diskEntry) []diskEntry {
	d.mu.Lock()
	old := d.ix.chunks[c]
	d.mu.Unlock()
	if !d.copyChunk(mem, old) {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.copyChunk(mem, old) {
		return nil
	}
	d.ix.chunks[c] = mem
	return old
}

// copyChunk copies a mapped chunk; false when a page of the image could
// not be read again (the page cache let it go since the load read it,
// and the disk fails): that chunk stays mapped.
func (d *disk) copyChunk(dst, src []diskEntry) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			d.log.WithField("disk", d.dir).WithField("fault", fmt.Sprint(r)).Error("cache disk: a page of the index image cannot be read again")
			d.errors.Add(1)
			ok = false
		}
	}()
	copy(dst, src)
	return true
}

// mapChunk maps a chunk for the slab with its pages taken at once: a
// page fault each, taken one at a time, cost a third of a journal replay
// in a VM. A mapping a chunk long holds the process's memory map for
// that long only (one for the whole slab held it, and any thread that
// grew the heap, for a quarter of a second at 20M entries). It is never
// let go once the index is in use: the slab does not shrink.
func mapChunk() ([]diskEntry, error) {
	mem, err := syscall.Mmap(-1, 0, chunkBytes, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_ANON|syscall.MAP_PRIVATE|syscall.MAP_POPULATE)
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*diskEntry)(unsafe.Pointer(&mem[0])), chunkLen), nil
}

// imageChunk is a chunk of the slab holding the entries at off in the
// image: the file's pages mapped privately, which costs nothing until
// they are read (the checks read them from the page cache: 125-152 ms
// for a 10M index's 370 MiB here, where reading them into new memory
// took 638-809 ms, three runs); a write to the chunk copies its page and never reaches the
// file, which may leave the directory. ownChunks copies the chunks
// once the index is in use. Where the file cannot be mapped so, the
// chunk is read.
func imageChunk(f *os.File, off int64) ([]diskEntry, error) {
	if off%int64(os.Getpagesize()) == 0 {
		mem, err := syscall.Mmap(int(f.Fd()), off, chunkBytes, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE)
		if err == nil {
			return unsafe.Slice((*diskEntry)(unsafe.Pointer(&mem[0])), chunkLen), nil
		}
	}
	c, err := mapChunk()
	if err == nil {
		err = readPiece(f, off, chunkView(c))
	}
	return c, err
}

// readPiece reads the bytes at off into its views.
func readPiece(f *os.File, off int64, views ...[]byte) error {
	for _, b := range views {
		if _, err := f.ReadAt(b, off); err != nil {
			return fmt.Errorf("cut short: %w", err)
		}
		off += int64(len(b))
	}
	return nil
}

// checkPiece checks the piece at off, held in views, against want.
func checkPiece(views [][]byte, want uint32, off int64) error {
	c := uint32(0)
	for _, b := range views {
		c = crc32.Update(c, castagnoli, b)
	}
	if c != want {
		return fmt.Errorf("a piece at byte %d does not check out", off)
	}
	return nil
}

// checkTable adds up a piece of the table: every value names a slot in
// the slab.
func (s *imageSum) checkTable(b []byte, used uint64) error {
	t := unsafe.Slice((*slot)(unsafe.Pointer(&b[0])), len(b)/4)
	for _, v := range t {
		if v == 0 {
			continue
		}
		if uint64(v&slotMask) > used || v&slotMask == 0 {
			return fmt.Errorf("the table names slot %d of %d", v&slotMask, used)
		}
		s.taken++
		s.table += mix(v)
	}
	return nil
}

// checkChunk adds up chunk c's entries in use (its entries past the
// slab's high water are not read).
func (s *imageSum) checkChunk(x *diskIndex, c int, segs map[uint32]imageSeg) error {
	ch := x.chunks[c]
	n := min(chunkLen, x.used-c*chunkLen)
	for i := range n {
		e := &ch[i]
		if int(e.sib) > x.used {
			return fmt.Errorf("entry %d names slot %d of %d", c*chunkLen+i+1, e.sib, x.used)
		}
		if e.id == 0 {
			s.free++
			continue
		}
		sl := slot(c*chunkLen + i + 1)
		s.entries++
		s.heads += mix(sl | fingerprint(e.key))
		if e.sib != 0 {
			s.links = append(s.links, sl)
		}
		if _, ok := segs[segNo(e.id)]; !isSeg(e.id) || ok {
			s.objects++
			s.bytes += e.size()
		}
		if _, ok := segs[segNo(e.id)]; isSeg(e.id) && ok {
			if s.segs == nil {
				s.segs = map[uint32]imageSeg{}
			}
			g := s.segs[segNo(e.id)]
			g.count++
			g.live += uint64(e.size())
			s.segs[segNo(e.id)] = g
		}
	}
	return nil
}

// checkLinks checks the chains of variants: each link joins two entries
// in use of one key, no entry is the next of two, and every chain ends
// within maxVariants. The links' targets are no chain's first entry:
// they come out of the heads' sum.
func (x *diskIndex) checkLinks(sum *imageSum) error {
	if len(sum.links) == 0 {
		return nil
	}
	target := make(map[slot]bool, len(sum.links))
	for _, s := range sum.links {
		e := x.at(s)
		t := x.at(e.sib)
		if t.id == 0 || t.key != e.key || target[e.sib] {
			return fmt.Errorf("entry %d's next variant, %d, is not one", s, e.sib)
		}
		target[e.sib] = true
		sum.heads -= mix(e.sib | fingerprint(t.key))
	}
	walked := 0
	for _, s := range sum.links {
		if target[s] {
			continue // inside a chain, walked from its first
		}
		n := 0
		for t := x.at(s).sib; t != 0; t = x.at(t).sib {
			if n++; n >= maxVariants {
				return fmt.Errorf("entry %d's chain is longer than %d", s, maxVariants)
			}
		}
		walked += n
	}
	if walked != len(sum.links) {
		return errors.New("a chain of variants loops")
	}
	return nil
}

// freeLen walks the free list, at most want steps: its length, and
// whether it holds exactly the want free entries.
func (x *diskIndex) freeLen(want int) (int, bool) {
	n := 0
	for s := x.free; s != 0; s = x.at(s).sib {
		if n == want || x.at(s).id != 0 {
			return n, false
		}
		n++
	}
	return n, n == want
}
