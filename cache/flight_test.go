package cache

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// Collapsed forwarding: followers of a flight are served from the
// leader's response as it streams, or sent on their own when it cannot be
// shared, and then the key is not collapsed for a while.
func TestFlights(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := testCache(t)
		r := request(t, "GET", url)
		f, leader := c.Join(r, t0)
		if f == nil || !leader {
			t.Fatal("the first miss does not lead a flight")
		}
		if g, lead := c.Join(request(t, "GET", url), t0); g != f || lead {
			t.Fatal("a concurrent miss does not follow the flight")
		}
		got := make(chan string)
		go func() {
			o, _ := f.Wait(time.Minute, nil)
			if o == nil {
				got <- "<nil>"
				return
			}
			var b []byte
			for off := int64(0); ; {
				p, done, failed := o.Stream(off)
				b = append(b, p...)
				off += int64(len(p))
				if failed {
					got <- "<failed>"
					return
				}
				if done {
					got <- string(b)
					return
				}
			}
		}()
		w := c.Admit(r, response(t, "200 OK", "Cache-Control: max-age=60"), 10, t0, t0, f)
		if w == nil {
			t.Fatal("not admitted")
		}
		w.Write([]byte("01234"))
		synctest.Wait() // the follower has read what arrived and waits for more
		w.Write([]byte("56789"))
		w.Finish(true)
		if b := <-got; b != "0123456789" {
			t.Fatalf("follower got %q", b)
		}
		if _, v := c.Lookup(r, t0); v != Hit {
			t.Fatalf("after the flight: %v, want a hit", v)
		}

		// Uncacheable: the follower goes on its own, later misses are not
		// collapsed until the pass expires.
		r2 := request(t, "GET", url+"?private")
		f2, _ := c.Join(r2, t0)
		done := make(chan *Object)
		go func() { o, _ := f2.Wait(time.Minute, nil); done <- o }()
		if c.Admit(r2, response(t, "200 OK", "Cache-Control: private"), 2, t0, t0, f2) != nil {
			t.Fatal("private response admitted")
		}
		if o := <-done; o != nil {
			t.Fatal("follower of an uncacheable response got an object")
		}
		if g, _ := c.Join(r2, time.Now()); g != nil {
			t.Fatal("a key whose answer could not be stored is collapsed again at once")
		}
		if g, lead := c.Join(r2, time.Now().Add(passFor+time.Second)); g == nil || !lead {
			t.Fatal("the pass does not expire")
		}

		// A flight whose leader fails: followers are told to elect a new
		// leader, and the next Join leads.
		r3 := request(t, "GET", url+"?gone")
		f3, _ := c.Join(r3, t0)
		ends := make(chan FlightEnd)
		go func() { _, e := f3.Wait(time.Minute, nil); ends <- e }()
		c.Land(f3, nil, false)
		if e := <-ends; e != Failed {
			t.Fatalf("follower of a failed flight: end %v; want Failed", e)
		}
		if _, lead := c.Join(r3, t0); !lead {
			t.Fatal("a flight abandoned without a pass blocks the next miss")
		}

		// A follower whose client leaves stops waiting at once; one that
		// waits too long gives up.
		r5 := request(t, "GET", url+"?left")
		f5, _ := c.Join(r5, t0)
		gone := make(chan struct{})
		go func() { _, e := f5.Wait(time.Minute, gone); ends <- e }()
		close(gone)
		if e := <-ends; e != Left {
			t.Fatalf("follower whose client left: end %v; want Left", e)
		}
		if _, e := f5.Wait(time.Second, nil); e != TimedOut {
			t.Fatalf("follower past its wait: end %v; want TimedOut", e)
		}

		// Oversized: the body outgrows max_object; a streaming follower
		// is told it failed.
		r4 := request(t, "GET", url+"?big")
		f4, _ := c.Join(r4, t0)
		w4 := c.Admit(r4, response(t, "200 OK", "Cache-Control: max-age=60"), -1, t0, t0, f4)
		go func() { o, _ := f4.Wait(time.Minute, nil); done <- o }()
		w4.Write(make([]byte, DefaultConfig().MaxObject+1))
		if o := <-done; o != nil {
			t.Fatal("follower of an oversized chunked response got an object")
		}
		w4.Finish(true)
		if _, v := c.Lookup(r4, t0); v != Miss {
			t.Fatalf("oversized response: %v, want it not stored", v)
		}
	})
}

// TestLateJoinerFollowsAStreamingObject: a miss that comes after the
// leader's head landed the flight, but before the object is stored,
// follows the streaming object instead of leading a second fetch (a
// fleet member's followers, sent on after the owner's head, used to
// reach the parent again in that window). Once the object is stored or
// given up, the key leads a new flight again.
func TestLateJoinerFollowsAStreamingObject(t *testing.T) {
	c := testCache(t)
	r := request(t, "GET", url)
	f, _ := c.Join(r, t0)
	w := c.Admit(r, response(t, "200 OK", "Cache-Control: max-age=60"), 10, t0, t0, f)
	w.Write([]byte("01234"))
	g, lead := c.Join(request(t, "GET", url), t0)
	if g != f || lead {
		t.Fatalf("a miss while the body streams: flight %p, leader %v; want to follow %p", g, lead, f)
	}
	if o, end := g.Wait(time.Second, nil); end != Shared || o == nil {
		t.Fatalf("the late follower's wait ended %v; want the streaming object", end)
	}
	w.Write([]byte("56789"))
	w.Finish(true)
	if _, v := c.Lookup(r, t0); v != Hit {
		t.Fatalf("after the body: %v; want a hit", v)
	}

	// Given up halfway: the key is off the flight, the next miss leads.
	r2 := request(t, "GET", url+"2")
	f2, _ := c.Join(r2, t0)
	w2 := c.Admit(r2, response(t, "200 OK", "Cache-Control: max-age=60"), 10, t0, t0, f2)
	w2.Write([]byte("01234"))
	w2.Finish(false)
	if g, lead := c.Join(request(t, "GET", url+"2"), t0); g == f2 || !lead {
		t.Fatalf("after a failed body: flight %p, leader %v; want a new flight to lead", g, lead)
	}
}

// TestPassesHoldNoURLs: the hit-for-miss table keeps no key: a client
// sending uncacheable URLs of 60 KB (any max_header_size allows) leaves
// the cache holding a few bytes per URL for passFor, not the URLs.
func TestPassesHoldNoURLs(t *testing.T) {
	c := testCache(t)
	long := strings.Repeat("u", 60<<10)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const n = 2000 // 120 MB of URLs
	for i := range n {
		r := request(t, "GET", fmt.Sprintf("%s/%d/%s", url, i, long))
		f, _ := c.Join(r, t0)
		c.Land(f, nil, true) // its answer could not be stored
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 8<<20 {
		t.Fatalf("the heap grew by %d MiB for %d passes of 60 KB URLs", grew>>20, n)
	}
	if g, _ := c.Join(request(t, "GET", fmt.Sprintf("%s/%d/%s", url, 7, long)), time.Now()); g != nil {
		t.Fatal("a URL whose answer could not be stored is collapsed again at once")
	}
}
