package cache

// This file holds the memory store's small FIFO (policy.go): an intrusive
// doubly linked list of objects, newest first, with the bytes it holds.
// The links live in the object, so no operation allocates.

// fifoLinks are an object's place in the FIFO.
type fifoLinks struct {
	prev, next *Object
}

// objFIFO is the list, newest at head, oldest at tail.
type objFIFO struct {
	head, tail *Object
	size       int64
}

func (l *objFIFO) pushFront(o *Object) {
	o.fifo.prev, o.fifo.next = nil, l.head
	if l.head != nil {
		l.head.fifo.prev = o
	}
	l.head = o
	if l.tail == nil {
		l.tail = o
	}
	l.size += o.Size
}

func (l *objFIFO) remove(o *Object) {
	if o.fifo.prev != nil {
		o.fifo.prev.fifo.next = o.fifo.next
	} else {
		l.head = o.fifo.next
	}
	if o.fifo.next != nil {
		o.fifo.next.fifo.prev = o.fifo.prev
	} else {
		l.tail = o.fifo.prev
	}
	o.fifo.prev, o.fifo.next = nil, nil
	l.size -= o.Size
}
