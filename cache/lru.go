package cache

// This file holds the segmented LRU the disk store keeps, and the
// intrusive doubly linked lists it is made of (the memory store's small
// FIFO is one too): the links live in the element, so no operation
// allocates.

// links are an element's place in a list, and which segment it is in.
type links[P any] struct {
	prev, next P
	protected  bool
}

// lruItem is what a list holds: a pointer with links and a weight in
// bytes.
type lruItem[P any] interface {
	comparable
	lruLinks() *links[P]
	lruBytes() int64
}

// lruList is a list, most recent first, with the bytes it holds.
type lruList[P lruItem[P]] struct {
	head, tail P
	size       int64
}

func (l *lruList[P]) pushFront(e P) {
	var none P
	lk := e.lruLinks()
	lk.prev, lk.next = none, l.head
	if l.head != none {
		l.head.lruLinks().prev = e
	}
	l.head = e
	if l.tail == none {
		l.tail = e
	}
	l.size += e.lruBytes()
}

func (l *lruList[P]) remove(e P) {
	var none P
	lk := e.lruLinks()
	if lk.prev != none {
		lk.prev.lruLinks().next = lk.next
	} else {
		l.head = lk.next
	}
	if lk.next != none {
		lk.next.lruLinks().prev = lk.prev
	} else {
		l.tail = lk.prev
	}
	lk.prev, lk.next = none, none
	l.size -= e.lruBytes()
}

// prevOf is the element before e (towards the head).
func prevOf[P lruItem[P]](e P) P { return e.lruLinks().prev }

// slru is a segmented LRU. A new element enters probation; a hit there
// promotes it to protected, whose least recently used elements fall back
// to probation beyond protCap bytes; the victim of eviction is probation's
// least recently used element, else protected's.
type slru[P lruItem[P]] struct {
	probation, protected lruList[P]
}

// add puts a new element at the front of probation.
func (s *slru[P]) add(e P) {
	e.lruLinks().protected = false
	s.probation.pushFront(e)
}

// remove takes e out of its segment.
func (s *slru[P]) remove(e P) {
	if e.lruLinks().protected {
		s.protected.remove(e)
	} else {
		s.probation.remove(e)
	}
}

// touch records a hit on e.
func (s *slru[P]) touch(e P, protCap int64) {
	lk := e.lruLinks()
	if lk.protected {
		s.protected.remove(e)
		s.protected.pushFront(e)
		return
	}
	// A hit in probation: promote, and let protected's coldest fall back.
	s.probation.remove(e)
	lk.protected = true
	s.protected.pushFront(e)
	var none P
	for s.protected.size > protCap && s.protected.tail != none && s.protected.tail != e {
		c := s.protected.tail
		s.protected.remove(c)
		c.lruLinks().protected = false
		s.probation.pushFront(c)
	}
}

// victim is the element eviction takes next (the zero P when empty).
func (s *slru[P]) victim() P {
	var none P
	if s.probation.tail != none {
		return s.probation.tail
	}
	return s.protected.tail
}

// The elements. staticcheck does not follow calls through a type
// parameter's constraint, so it is told these are used (by lruList).

//lint:ignore U1000 used through lruList's constraint
func (o *Object) lruLinks() *links[*Object] { return &o.links }

//lint:ignore U1000 used through lruList's constraint
func (o *Object) lruBytes() int64 { return o.Size }

//lint:ignore U1000 used through lruList's constraint
func (e *diskEntry) lruLinks() *links[*diskEntry] { return &e.links }

//lint:ignore U1000 used through lruList's constraint
func (e *diskEntry) lruBytes() int64 { return e.size }
