package peers

// This file holds the registry's change feed: every write transaction
// tracks what it changed (memdb TrackChanges, as Consul's state store
// does), and each subscriber (the prober, the fleet) is told which peers
// changed instead of rescanning all of them on every wake-up.

import (
	"sync"

	memdb "github.com/hashicorp/go-memdb"
)

// Changes is one subscriber's feed: the peers whose rows changed since it
// last took them, and a channel signalled when there are some.
type Changes struct {
	mu    sync.Mutex
	peers map[*Peer]struct{}
	all   bool // a reload (or the first look): every peer
	c     chan struct{}
}

// C is signalled when changes are waiting to be taken.
func (c *Changes) C() <-chan struct{} { return c.c }

// Take returns the peers changed since the last Take (all: the peer set
// itself changed, look at every peer, and drop what is no longer there).
func (c *Changes) Take() (changed []*Peer, all bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	all, c.all = c.all, false
	for p := range c.peers {
		changed = append(changed, p)
		delete(c.peers, p)
	}
	return changed, all
}

func (c *Changes) add(ps []*Peer, all bool) {
	c.mu.Lock()
	c.all = c.all || all
	for _, p := range ps {
		c.peers[p] = struct{}{}
	}
	c.mu.Unlock()
	select {
	case c.c <- struct{}{}:
	default:
	}
}

// subscribers are the registry's feeds.
type subscribers struct {
	mu   sync.Mutex
	list []*Changes
}

// Subscribe returns a new feed; its first Take reports every peer.
func (r *Registry) Subscribe() *Changes {
	c := &Changes{peers: map[*Peer]struct{}{}, all: true, c: make(chan struct{}, 1)}
	c.c <- struct{}{}
	r.subs.mu.Lock()
	r.subs.list = append(r.subs.list, c)
	r.subs.mu.Unlock()
	return c
}

// Unsubscribe stops a feed.
func (r *Registry) Unsubscribe(c *Changes) {
	r.subs.mu.Lock()
	defer r.subs.mu.Unlock()
	for i, x := range r.subs.list {
		if x == c {
			r.subs.list = append(r.subs.list[:i], r.subs.list[i+1:]...)
			return
		}
	}
}

// writeTxn starts a write transaction that tracks its changes.
func (r *Registry) writeTxn() *memdb.Txn {
	txn := r.db.Txn(true)
	txn.TrackChanges()
	return txn
}
