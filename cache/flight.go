package cache

// This file holds collapsed forwarding: a flight is one request to the
// next hop that concurrent misses for the same key follow, how a
// follower's wait ends, and how a flight lands (with an object, a
// failure to share, or nothing).

import "time"

// Flight is one request to the next hop that concurrent requests for the
// same key wait for instead of sending their own.
type Flight struct {
	key    string
	ready  chan struct{}
	obj    *Object
	landed bool
	// failed: the leader got no answer to share (it failed, or its client
	// left); the followers elect a new leader rather than all going to
	// the next hop. Set before ready is closed.
	failed bool
	// err is the leader's failure at its next hops, which its followers
	// answer with (Errored): sent once, failed once.
	err error
}

// FlightEnd is how a follower's wait ended.
type FlightEnd uint8

const (
	// Shared: the leader's response is there to answer from (it may
	// still be streaming).
	Shared FlightEnd = iota
	// Alone: the response could not be shared; go to the next hop.
	Alone
	// Failed: the leader got no answer; join again to elect a new one.
	Failed
	// Left: the follower's client went away.
	Left
	// TimedOut: the leader took longer than the follower may wait.
	TimedOut
	// Errored: every next hop the leader tried failed (Err says how);
	// the followers answer with that failure and send nothing.
	Errored
)

// Join returns the flight for r's key: leader true means r goes to the
// next hop and must land the flight (Admit, Finish or Land); otherwise r
// waits for it. nil means r is not collapsed: collapsing is off, the
// request is not a plain one, or the key's last answer was not storable.
func (c *Cache) Join(r *Request, now time.Time) (f *Flight, leader bool) {
	if !c.cfg().collapse || r.Method != "GET" || r.Conditional || r.Range != nil || r.Authorization || r.CC.NoStore() {
		return nil, false
	}
	sh := c.flightShard(r.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	h := keyHashOf(r.Key)
	if until, ok := sh.passes[h]; ok {
		if now.UnixNano() < until {
			return nil, false
		}
		delete(sh.passes, h)
	}
	if f := sh.flights[string(r.Key)]; f != nil {
		if !f.landed || f.obj.streaming() {
			return f, false
		}
		delete(sh.flights, f.key) // its object ended and was not delisted
	}
	f = &Flight{key: string(r.Key), ready: make(chan struct{})}
	sh.flights[f.key] = f
	return f, true
}

// Wait blocks until the flight's response is known, the follower's
// client leaves (gone is closed), or timeout; it returns the object to
// answer from when the end is Shared.
func (f *Flight) Wait(timeout time.Duration, gone <-chan struct{}) (*Object, FlightEnd) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-f.ready:
		switch {
		case f.obj != nil:
			return f.obj, Shared
		case f.err != nil:
			return nil, Errored
		case f.failed:
			return nil, Failed
		}
		return nil, Alone
	case <-gone:
		return nil, Left
	case <-t.C:
		return nil, TimedOut
	}
}

// Land ends a flight with the object its followers are served from. With
// nil and pass the response could not be shared: they go on their own and
// the key is not collapsed for a while; with nil and no pass the leader
// failed: they elect a new leader. Landing twice, or a nil flight, is
// harmless.
//
// Landing a flight that landed already only takes it off the key: see
// landStreaming.
func (c *Cache) Land(f *Flight, o *Object, pass bool) { c.land(f, o, pass, false) }

// landStreaming lands f with an object whose body is still arriving, and
// leaves the flight on its key: a request that comes after the landing
// but before the object is stored (Finish, or the disk's commit) follows
// it too, instead of finding nothing and fetching the key again. The
// writer lands it once more when the object is stored or given up, which
// takes it off.
func (c *Cache) landStreaming(f *Flight, o *Object) { c.land(f, o, false, true) }

func (c *Cache) land(f *Flight, o *Object, pass, keep bool) {
	if f == nil {
		return
	}
	sh := c.flightShard([]byte(f.key))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !keep && sh.flights[f.key] == f {
		delete(sh.flights, f.key)
	}
	if f.landed {
		return
	}
	f.landed, f.obj, f.failed = true, o, o == nil && !pass
	if pass {
		sh.passes[keyHashOf([]byte(f.key))] = time.Now().Add(passFor).UnixNano()
		if len(sh.passes) > maxPasses/nShards {
			sh.trimPassesLocked()
		}
	}
	close(f.ready)
}

// LandFailure ends a flight whose leader got no answer from any next hop
// it tried: the followers answer with err (Errored) instead of each
// sending the request again. A leader that did not finish for a reason
// of its own (its client left) lands with Land(f, nil, false) instead,
// and the followers elect one new leader.
func (c *Cache) LandFailure(f *Flight, err error) {
	if f == nil {
		return
	}
	sh := c.flightShard([]byte(f.key))
	sh.mu.Lock()
	if !f.landed {
		f.err = err // under the lock: Land below closes ready after it
	}
	sh.mu.Unlock()
	c.Land(f, nil, false)
}

// Err is the leader's failure of a flight that ended Errored.
func (f *Flight) Err() error { return f.err }

// maxPasses bounds the hit-for-miss table.
const maxPasses = 64 << 10

func (sh *flightShard) trimPassesLocked() {
	now := time.Now().UnixNano()
	for k, until := range sh.passes {
		if until <= now || len(sh.passes) > maxPasses/nShards/2 {
			delete(sh.passes, k)
		}
	}
}
