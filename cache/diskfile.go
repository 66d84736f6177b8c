package cache

// This file holds the format of one object file in the disk store and
// the reading of it: a head that rebuilds the Object, the body, and a
// trailer with a checksum per 64 KiB block of the body. Nothing of a file
// is believed before its checksum: a file cut short (a crash while it was
// written, a power loss) or changed on the disk is found when it is read
// and is never served.
//
//	"PEERDOB1"            8 bytes
//	head length H         4 bytes, big-endian
//	head                  H bytes (encodeHead)
//	body                  B bytes
//	block checksums       4 bytes per 64 KiB block of the body (CRC-32C)
//	tail                  B (8), H (4), blocks (4), CRC of the head (4),
//	                      CRC of the block checksums and these fields (4),
//	                      "PEERDEND" (8)

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

const (
	fileMagic = "PEERDOB1"
	// prefixSize is the magic and the head length before the head.
	prefixSize = 8 + 4
	tailMagic  = "PEERDEND"
	tailSize   = 32
	blockSize  = 64 << 10
	// maxHead bounds a head read from a file (a head is the stored fields
	// and the key; net/http allows 1 MiB of header).
	maxHead = 4 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt is a file that does not check out.
var errCorrupt = errors.New("stored object does not check out")

// diskRef is where a disk-only object's body is.
type diskRef struct {
	c       *Cache
	id      uint64
	bodyOff int64
	bodyLen int64
	crcs    []uint32
}

// encodeHead serializes what rebuilds o (the derived fields are
// recomputed by index when it is read back).
func encodeHead(o *Object) []byte {
	b := make([]byte, 0, 128+len(o.Key)+len(o.secondary)+len(o.reason)+len(o.fields))
	b = append(b, 1) // version
	b = appendBytes(b, []byte(o.Key))
	b = appendBytes(b, []byte(o.secondary))
	b = binary.AppendUvarint(b, uint64(o.Status))
	b = appendBytes(b, o.reason)
	b = appendBytes(b, o.fields)
	for _, v := range []int64{o.requestTime, o.responseTime, o.ageValue, o.lifetime, o.swr, o.sie, o.first, o.total} {
		b = binary.AppendVarint(b, v)
	}
	b = binary.AppendUvarint(b, uint64(o.flags))
	if o.partial {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(o.varyValues)))
	for _, v := range o.varyValues {
		if v == nil {
			b = append(b, 0)
			continue
		}
		b = append(b, 1)
		b = appendBytes(b, v)
	}
	return b
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// headReader takes a head apart; the first error sticks.
type headReader struct {
	b   []byte
	err error
}

func (h *headReader) uvarint() uint64 {
	if h.err != nil {
		return 0
	}
	v, n := binary.Uvarint(h.b)
	if n <= 0 {
		h.err = errCorrupt
		return 0
	}
	h.b = h.b[n:]
	return v
}

// varint is binary.Varint's zig-zag decoding of a uvarint.
func (h *headReader) varint() int64 {
	u := h.uvarint()
	x := int64(u >> 1)
	if u&1 != 0 {
		x = ^x
	}
	return x
}

func (h *headReader) bytes() []byte {
	n := h.uvarint()
	if h.err != nil || n > uint64(len(h.b)) {
		h.err = errCorrupt
		return nil
	}
	v := h.b[:n:n]
	h.b = h.b[n:]
	return v
}

func (h *headReader) byte() byte {
	if h.err != nil || len(h.b) == 0 {
		h.err = errCorrupt
		return 0
	}
	c := h.b[0]
	h.b = h.b[1:]
	return c
}

// decodeHead rebuilds an object from its head; it fails on anything that
// is not a head encodeHead wrote.
func decodeHead(b []byte) (*Object, error) {
	h := &headReader{b: b}
	if h.byte() != 1 {
		return nil, errCorrupt
	}
	o := &Object{}
	o.Key = string(h.bytes())
	o.secondary = string(h.bytes())
	status := h.uvarint()
	o.reason = h.bytes()
	o.fields = h.bytes()
	for _, p := range []*int64{&o.requestTime, &o.responseTime, &o.ageValue, &o.lifetime, &o.swr, &o.sie, &o.first, &o.total} {
		*p = h.varint()
	}
	flags := h.uvarint()
	partial := h.byte()
	o.partial = partial == 1
	nv := h.uvarint()
	if h.err != nil || partial > 1 || status < 100 || status > 999 || flags > 1<<32-1 || nv > uint64(len(h.b)) || len(o.Key) == 0 {
		return nil, errCorrupt
	}
	o.Status, o.flags = int(status), uint32(flags)
	if len(o.reason) == 0 {
		o.reason = nil
	}
	o.varyValues = make([][]byte, nv)
	for i := range o.varyValues {
		switch h.byte() {
		case 0:
		case 1:
			o.varyValues[i] = h.bytes()
		default:
			return nil, errCorrupt
		}
	}
	if h.err != nil || len(h.b) != 0 {
		return nil, errCorrupt
	}
	o.index(nil)
	if len(o.vary) != len(o.varyValues) {
		return nil, errCorrupt
	}
	return o, nil
}

// tail is a file's fixed trailer.
type tail struct {
	bodyLen int64
	headLen uint32
	blocks  uint32
	headCRC uint32
}

func blocksOf(n int64) int64 { return (n + blockSize - 1) / blockSize }

// appendPrefix appends a file's beginning: the magic, the head's length
// and the head.
func appendPrefix(b, head []byte) []byte {
	b = append(b, fileMagic...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(head)))
	return append(b, head...)
}

// bodyOffset is where the body starts after a head of h bytes.
func bodyOffset(h int64) int64 { return prefixSize + h }

// appendTail appends the block checksums and the tail.
func appendTail(b []byte, crcs []uint32, t tail) []byte {
	start := len(b)
	for _, c := range crcs {
		b = binary.BigEndian.AppendUint32(b, c)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(t.bodyLen))
	b = binary.BigEndian.AppendUint32(b, t.headLen)
	b = binary.BigEndian.AppendUint32(b, t.blocks)
	b = binary.BigEndian.AppendUint32(b, t.headCRC)
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
	return append(b, tailMagic...)
}

// fileSize is the size of a file with a head of h bytes and a body of n.
func fileSize(h, n int64) int64 { return bodyOffset(h) + n + 4*blocksOf(n) + tailSize }

// readObject reads an object's own file (readObjectAt).
func readObject(f *os.File) (*Object, *diskRef, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	return readObjectAt(f, 0, st.Size())
}

// readObjectAt reads the head and checksums (not the body) of the object
// file of size bytes at base in r (a file of its own at 0, or a record in
// a segment) and checks them: the object, and where its body is in r.
func readObjectAt(f io.ReaderAt, base, size int64) (*Object, *diskRef, error) {
	if size < prefixSize+tailSize {
		return nil, nil, errCorrupt
	}
	var tb [tailSize]byte
	if _, err := f.ReadAt(tb[:], base+size-tailSize); err != nil {
		return nil, nil, readErr(err)
	}
	if string(tb[24:]) != tailMagic {
		return nil, nil, errCorrupt
	}
	t := tail{
		bodyLen: int64(binary.BigEndian.Uint64(tb[0:])), headLen: binary.BigEndian.Uint32(tb[8:]),
		blocks: binary.BigEndian.Uint32(tb[12:]), headCRC: binary.BigEndian.Uint32(tb[16:]),
	}
	if t.bodyLen < 0 || t.headLen > maxHead || int64(t.blocks) != blocksOf(t.bodyLen) || fileSize(int64(t.headLen), t.bodyLen) != size {
		return nil, nil, errCorrupt
	}
	head := make([]byte, prefixSize+int(t.headLen))
	if _, err := f.ReadAt(head, base); err != nil {
		return nil, nil, readErr(err)
	}
	if string(head[:len(fileMagic)]) != fileMagic || binary.BigEndian.Uint32(head[len(fileMagic):]) != t.headLen ||
		crc32.Checksum(head[prefixSize:], castagnoli) != t.headCRC {
		return nil, nil, errCorrupt
	}
	// The block checksums and the tail up to its own checksum.
	cb := make([]byte, 4*int(t.blocks)+tailSize-len(tailMagic))
	if _, err := f.ReadAt(cb, base+size-int64(len(cb))-int64(len(tailMagic))); err != nil {
		return nil, nil, readErr(err)
	}
	if crc32.Checksum(cb[:len(cb)-4], castagnoli) != binary.BigEndian.Uint32(cb[len(cb)-4:]) {
		return nil, nil, errCorrupt
	}
	crcs := make([]uint32, t.blocks)
	for i := range crcs {
		crcs[i] = binary.BigEndian.Uint32(cb[4*i:])
	}
	o, err := decodeHead(head[prefixSize:])
	if err != nil {
		return nil, nil, err
	}
	if o.partial && (o.first < 0 || o.total < o.first+t.bodyLen) {
		return nil, nil, errCorrupt
	}
	return o, &diskRef{bodyOff: base + bodyOffset(int64(t.headLen)), bodyLen: t.bodyLen, crcs: crcs}, nil
}

func readErr(err error) error {
	if errors.Is(err, io.EOF) {
		return errCorrupt
	}
	return err
}

// readBlock reads body block i of ref into buf (at least blockSize long)
// and checks it: the block's bytes.
func (ref *diskRef) readBlock(f io.ReaderAt, i int64, buf []byte) ([]byte, error) {
	off := i * blockSize
	n := min(blockSize, ref.bodyLen-off)
	if i < 0 || n <= 0 || int(i) >= len(ref.crcs) {
		return nil, fmt.Errorf("block %d out of range", i)
	}
	p := buf[:n]
	if _, err := f.ReadAt(p, ref.bodyOff+off); err != nil {
		return nil, readErr(err)
	}
	if crc32.Checksum(p, castagnoli) != ref.crcs[i] {
		return nil, errCorrupt
	}
	return p, nil
}

// readBody reads and checks a whole body (one that is promoted to memory).
func (ref *diskRef) readBody(f io.ReaderAt) ([]byte, error) {
	body := make([]byte, ref.bodyLen)
	if _, err := f.ReadAt(body, ref.bodyOff); err != nil && !(errors.Is(err, io.EOF) && ref.bodyLen == 0) {
		return nil, readErr(err)
	}
	for i := range ref.crcs {
		p := body[int64(i)*blockSize : min(int64(i+1)*blockSize, ref.bodyLen)]
		if crc32.Checksum(p, castagnoli) != ref.crcs[i] {
			return nil, errCorrupt
		}
	}
	return body, nil
}
