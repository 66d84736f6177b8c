package cache

// This file holds the open files of disk-only objects (nginx's
// open_file_cache): a hit on a hot object reads its open file instead of
// opening and closing it, which halved a disk hit's system calls. A file
// leaves when the store drops its object (closed once no hit reads it)
// or when more than maxOpen are open (the least recently used first).

import (
	"os"
	"sync"
)

// maxOpen bounds the files kept open.
const maxOpen = 1024

type openFile struct {
	f    *os.File
	refs int
	used uint64
	dead bool // dropped while read: closed by the last reader
}

type fdCache struct {
	mu    sync.Mutex
	files map[uint64]*openFile
	clock uint64
}

// get returns object id's open file, opening path when need be; put it
// back when done.
func (c *fdCache) get(id uint64, path string) (*openFile, error) {
	c.mu.Lock()
	if c.files == nil {
		c.files = map[uint64]*openFile{}
	}
	c.clock++
	if o := c.files[id]; o != nil {
		o.refs++
		o.used = c.clock
		c.mu.Unlock()
		return o, nil
	}
	c.mu.Unlock()
	f, err := openNoFollow(path, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if o := c.files[id]; o != nil {
		// Opened meanwhile by another hit.
		f.Close()
		o.refs++
		return o, nil
	}
	o := &openFile{f: f, refs: 1, used: c.clock}
	c.files[id] = o
	if len(c.files) > maxOpen {
		c.evictLocked()
	}
	return o, nil
}

// evictLocked closes the least recently used file no hit reads.
func (c *fdCache) evictLocked() {
	var victim uint64
	var oldest *openFile
	for id, o := range c.files {
		if o.refs == 0 && (oldest == nil || o.used < oldest.used) {
			victim, oldest = id, o
		}
	}
	if oldest != nil {
		delete(c.files, victim)
		oldest.f.Close()
	}
}

// put gives a file back.
func (c *fdCache) put(o *openFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o.refs--
	if o.refs == 0 && o.dead {
		o.f.Close()
	}
}

// drop forgets object id's file (its object left the store).
func (c *fdCache) drop(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.files[id]
	if o == nil {
		return
	}
	delete(c.files, id)
	o.retire()
}

// closeAll closes every file (the store is closing).
func (c *fdCache) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, o := range c.files {
		delete(c.files, id)
		o.retire()
	}
}

// retire closes a file that left the cache, or has its last reader close
// it.
func (o *openFile) retire() {
	if o.refs == 0 {
		o.f.Close()
	} else {
		o.dead = true
	}
}
