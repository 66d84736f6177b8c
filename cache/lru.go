package cache

// This file holds the intrusive doubly linked list the memory store's
// small FIFO is (policy.go): the links live in the element, so no
// operation allocates.

// links are an element's place in a list.
type links[P any] struct {
	prev, next P
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

// The elements. staticcheck does not follow calls through a type
// parameter's constraint, so it is told these are used (by lruList).

//lint:ignore U1000 used through lruList's constraint
func (o *Object) lruLinks() *links[*Object] { return &o.links }

//lint:ignore U1000 used through lruList's constraint
func (o *Object) lruBytes() int64 { return o.Size }
