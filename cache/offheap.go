package cache

// This file holds the disk index's big memory: its table once it is 4 MiB
// or more, and its slab past the first chunks, mapped outside the Go heap
// with transparent huge pages asked for (MADV_HUGEPAGE). With 4 KiB pages,
// loading 10M entries took 174k page faults (a quarter of the load's CPU)
// and each random probe of the 64 MiB table a TLB miss besides its cache
// miss. The memory holds no Go pointers; it is unmapped when the disk
// store that owns it is collected, or at once for a table a rehash
// replaced.

import (
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"
)

const (
	hugePage = 2 << 20
	// bigTable is the table size, in positions, from which it is mapped.
	bigTable = 1 << 20
	// heapChunks are the slab chunks made on the Go heap (131k entries,
	// 6 MiB) before arenas of arenaChunks are mapped.
	heapChunks  = 8
	arenaChunks = 32
)

// offHeap is the mappings an index made, by the address each starts at.
type offHeap struct {
	maps map[uintptr][]byte
	live atomic.Int64 // mappings not given back (read by tests)
}

// newOffHeap is the big memory of owner's index, unmapped when owner
// is collected.
func newOffHeap[T any](owner *T) *offHeap {
	m := &offHeap{maps: map[uintptr][]byte{}}
	runtime.AddCleanup(owner, func(m *offHeap) { m.unmapAll() }, m)
	return m
}

// mapped is n zeroed values of T (which holds no pointers) outside the
// heap, aligned to a huge page; nil when the system refuses the mapping
// (the caller makes them on the heap instead).
func mapped[T any](m *offHeap, n int) []T {
	size := n * int(unsafe.Sizeof(*new(T)))
	b, err := syscall.Mmap(-1, 0, size+hugePage, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil
	}
	skip := (hugePage - int(uintptr(unsafe.Pointer(&b[0])))%hugePage) % hugePage
	use := b[skip : skip+size]
	syscall.Madvise(use, syscall.MADV_HUGEPAGE) // a hint: without it, 4 KiB pages
	m.maps[uintptr(unsafe.Pointer(&use[0]))] = b
	m.live.Add(1)
	return unsafe.Slice((*T)(unsafe.Pointer(&use[0])), n)
}

// unmap gives back the mapping s came from (nothing if it came from the
// heap).
func unmap[T any](m *offHeap, s []T) {
	if m == nil || len(s) == 0 {
		return
	}
	at := uintptr(unsafe.Pointer(&s[0]))
	if b, ok := m.maps[at]; ok {
		delete(m.maps, at)
		syscall.Munmap(b)
		m.live.Add(-1)
	}
}

func (m *offHeap) unmapAll() {
	for at, b := range m.maps {
		delete(m.maps, at)
		syscall.Munmap(b)
		m.live.Add(-1)
	}
}
