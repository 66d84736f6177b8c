package cache

// This file holds the index image: at a clean close (a stop, a reload
// that lets the store go, an upgrade's hand-over) the disk store writes
// its index as it lies in memory (the table, the slab's chunks with
// their reference bits, the CLOCK hand and the segments' figures) to one
// file, and the next start reads it back instead of replaying the
// journal: no record parsed and no key placed. The slab's chunks start
// on pages of the file and are mapped, not read (diskimageload.go): a 10M
// index's image (about 370 MiB: the table and the slab) is in use in
// about two fifths of the journal's replay (docs/benchmarks.md).
//
// The image stands for the journal it was written beside: it names that
// journal's length and the checksum of its last 64 KiB, and it is taken
// out of the directory as it is read, before the journal takes a record.
// A process that dies leaves no image (the next start replays the
// journal, as ever); an image that does not match, is cut or torn, or
// does not check out is dropped with a warning, and the journal is read.
//
// What the image names is checked before it is used, so that a bad one
// costs a replay, never a crash or a loop: every slot is inside the
// slab, each chain of variants ends within maxVariants and each of its
// links joins entries of one key, the free list reaches every free
// entry and nothing else, and the table holds each chain's first entry
// once (the sums of a mix of their slots and fingerprints agree). A
// table position off its key's probe path is not checked: a lookup
// would miss that key, as it misses any object not found.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"unsafe"
)

const (
	imageName = "index"
	// 16 bytes; v1 held 48-byte entries, v2 did not start each chunk
	// on a page (it was read, not mapped).
	imageMagic = "peerd index v3\n\x00"
	// imageTail is how much of the journal's end the image's checksum
	// of it covers.
	imageTail = 64 << 10
	// tablePiece is the table slots a checksum covers.
	tablePiece = 1 << 16
	entrySize  = int(unsafe.Sizeof(diskEntry{}))
	chunkBytes = chunkLen * entrySize
	refsBytes  = chunkLen / 8
	// The body starts on a page, and each chunk's piece is its
	// reference bits, zeros to a page, then its entries, so that each
	// chunk's entries start on a page of the file: the loader maps them
	// (diskimageload.go).
	imagePage       = 4096
	chunkPieceBytes = int64(imagePage + chunkBytes)
)

// imageBodyAt is where the body of an image with a header of hlen bytes
// starts: the table, then the chunks.
func imageBodyAt(hlen int64) int64 { return (hlen + imagePage - 1) &^ (imagePage - 1) }

// piecePad is the zeros between a chunk's reference bits and its entries.
var piecePad = make([]byte, imagePage-refsBytes)

// imageHeader is the image's first part, after its magic: fixed fields,
// then the segments, then a checksum per piece, then its own checksum.
type imageHeader struct {
	order, entry, chunk         uint64 // byte order, entry and chunk sizes: this build's, or the image is not read
	jsize, jtail                uint64 // the journal the image stands for
	used, free, keys, hand, tab uint64 // the slab and table
	segNext                     uint64
	segs                        []imageSeg
	crcs                        []uint32 // a piece per tablePiece slots of table, then per chunk
}

type imageSeg struct{ no, alloc, live, count uint64 }

const imageOrder = 0x0102030405060708

func (h *imageHeader) marshal() []byte {
	b := []byte(imageMagic)
	for _, v := range []uint64{h.order, h.entry, h.chunk, h.jsize, h.jtail, h.used, h.free, h.keys, h.hand, h.tab, h.segNext, uint64(len(h.segs)), uint64(len(h.crcs))} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	for _, s := range h.segs {
		for _, v := range []uint64{s.no, s.alloc, s.live, s.count} {
			b = binary.LittleEndian.AppendUint64(b, v)
		}
	}
	for _, c := range h.crcs {
		b = binary.LittleEndian.AppendUint32(b, c)
	}
	if len(h.crcs)%2 == 1 {
		b = append(b, 0, 0, 0, 0) // the body starts 8-byte aligned
	}
	return binary.LittleEndian.AppendUint64(b, uint64(crc32.Checksum(b, castagnoli)))
}

// imageHeaderLen is the length of a header with nsegs segments and
// ncrcs pieces.
func imageHeaderLen(nsegs, ncrcs uint64) int64 {
	return int64(len(imageMagic)+13*8) + int64(nsegs)*32 + int64(ncrcs+ncrcs%2)*4 + 8
}

// readImageHeader reads the header from the start of r, and reports its
// length.
func readImageHeader(r io.ReaderAt) (*imageHeader, int64, error) {
	fixed := make([]byte, len(imageMagic)+13*8)
	if _, err := r.ReadAt(fixed, 0); err != nil {
		return nil, 0, fmt.Errorf("header: %w", err)
	}
	if string(fixed[:len(imageMagic)]) != imageMagic {
		return nil, 0, errors.New("not an index image of this version")
	}
	u := func(i int) uint64 { return binary.LittleEndian.Uint64(fixed[len(imageMagic)+8*i:]) }
	h := &imageHeader{order: u(0), entry: u(1), chunk: u(2), jsize: u(3), jtail: u(4), used: u(5), free: u(6),
		keys: u(7), hand: u(8), tab: u(9), segNext: u(10)}
	nsegs, ncrcs := u(11), u(12)
	if nsegs > 1<<20 || ncrcs > 1<<24 {
		return nil, 0, fmt.Errorf("header names %d segments and %d pieces", nsegs, ncrcs)
	}
	n := imageHeaderLen(nsegs, ncrcs)
	b := make([]byte, n)
	if _, err := r.ReadAt(b, 0); err != nil {
		return nil, 0, fmt.Errorf("header: %w", err)
	}
	if binary.LittleEndian.Uint64(b[n-8:]) != uint64(crc32.Checksum(b[:n-8], castagnoli)) {
		return nil, 0, errors.New("the header does not check out")
	}
	p := b[len(fixed):]
	for range nsegs {
		h.segs = append(h.segs, imageSeg{binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[8:]),
			binary.LittleEndian.Uint64(p[16:]), binary.LittleEndian.Uint64(p[24:])})
		p = p[32:]
	}
	for range ncrcs {
		h.crcs = append(h.crcs, binary.LittleEndian.Uint32(p))
		p = p[4:]
	}
	return h, n, nil
}

// Byte views of the index's memory, as the image holds it.
func tableBytes(t []slot) []byte {
	if len(t) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&t[0])), len(t)*4)
}

func chunkView(c []diskEntry) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&c[0])), chunkBytes)
}

func refsView(r []uint64) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&r[0])), refsBytes) }

// imagePieces is the image's body as byte views of x: the table a piece
// at a time, then each chunk's reference bits and entries.
func imagePieces(x *diskIndex) [][][]byte {
	var ps [][][]byte
	tb := tableBytes(x.table)
	for i := 0; i < len(tb); i += tablePiece * 4 {
		ps = append(ps, [][]byte{tb[i:min(i+tablePiece*4, len(tb))]})
	}
	for c := range x.chunks {
		ps = append(ps, [][]byte{refsView(x.refs[c]), piecePad, chunkView(x.chunks[c])})
	}
	return ps
}

// journalTail is the checksum of the journal's last bytes (up to
// imageTail) when it is size bytes long.
func journalTail(path string, size int64) (uint64, error) {
	f, err := openNoFollow(path, os.O_RDONLY)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := min(size, imageTail)
	b := make([]byte, n)
	if _, err := f.ReadAt(b, size-n); err != nil {
		return 0, err
	}
	return uint64(crc32.Checksum(b, castagnoli)), nil
}

// writeImageLocked writes the index's image beside the journal, which
// takes no record after it (close holds the lock through both).
func (d *disk) writeImageLocked() error {
	jtail, err := journalTail(filepath.Join(d.dir, "journal"), d.jsize)
	if err != nil {
		return err
	}
	x := &d.ix
	h := &imageHeader{order: imageOrder, entry: uint64(entrySize), chunk: chunkLen, jsize: uint64(d.jsize), jtail: jtail,
		used: uint64(x.used), free: uint64(x.free), keys: uint64(x.keys), hand: uint64(x.hand), tab: uint64(len(x.table)),
		segNext: uint64(d.segNext)}
	for no, s := range d.segs {
		h.segs = append(h.segs, imageSeg{uint64(no), uint64(s.alloc), uint64(s.live), uint64(s.count)})
	}
	pieces := imagePieces(x)
	for _, p := range pieces {
		c := uint32(0)
		for _, b := range p {
			c = crc32.Update(c, castagnoli, b)
		}
		h.crcs = append(h.crcs, c)
	}
	tmp := filepath.Join(d.dir, imageName+".new")
	os.Remove(tmp)
	f, err := createNoFollow(tmp)
	if err != nil {
		return err
	}
	hb := h.marshal()
	_, err = f.Write(append(hb, make([]byte, imageBodyAt(int64(len(hb)))-int64(len(hb)))...))
	for _, p := range pieces {
		for _, b := range p {
			if err == nil {
				_, err = f.Write(b)
			}
		}
	}
	if err == nil && d.fsync.Load() {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(d.dir, imageName))
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// takeImage opens the image and takes it out of the directory (whatever
// it holds: once the journal takes a record, it stands for nothing);
// nil when there is none, or it is not the image of the journal at
// path, size bytes long.
func (d *disk) takeImage(path string, size int64) (*os.File, *imageHeader, int64) {
	ipath := filepath.Join(d.dir, imageName)
	os.Remove(ipath + ".new") // a close cut short
	f, err := openNoFollow(ipath, os.O_RDONLY)
	if err != nil {
		return nil, nil, 0
	}
	os.Remove(ipath)
	h, n, err := readImageHeader(f)
	if err == nil {
		var tail uint64
		tail, err = journalTail(path, size)
		if err == nil && (h.jsize != uint64(size) || h.jtail != tail) {
			err = errors.New("it was written beside another journal")
		}
	}
	if err != nil {
		f.Close()
		d.log.WithError(err).WithField("disk", d.dir).Warn("cache disk: the index image is not read; the journal is")
		return nil, nil, 0
	}
	return f, h, n
}

// errImageClosing is a store closed while its image was read.
var errImageClosing = errors.New("closing")
