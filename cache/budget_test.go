package cache

import (
	"fmt"
	"testing"
)

// TestInflightBudget: responses on their way to the store hold at most
// the in-flight budget between them; past it a response is relayed
// without being stored (Admit says no, so Cache-Status never says
// stored), and a body grows as it arrives, never by its whole
// Content-Length up front.
func TestInflightBudget(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Memory = 4 << 20     // budget: 1 MiB
	cfg.MaxObject = 96 << 10 // a shard holds 256 KiB
	c := New(cfg)
	resp := response(t, "200 OK", "Cache-Control: max-age=60")
	var ws []*Writer
	for i := 0; ; i++ {
		w := c.Admit(request(t, "GET", fmt.Sprintf("%s/%d", url, i)), resp, 90<<10, t0, t0, nil)
		if w == nil {
			if i != (1<<20)/(90<<10) {
				t.Fatalf("%d writers of 90 KiB admitted; the 1 MiB budget holds %d", i, (1<<20)/(90<<10))
			}
			break
		}
		ws = append(ws, w)
	}
	w := ws[0]
	w.Write(make([]byte, 1000))
	if got := cap(w.o.Body); got >= 90<<10 {
		t.Fatalf("after 1000 bytes of a 90 KiB body, %d bytes are allocated; want the body to grow as it arrives", got)
	}
	// Finishing one frees its share.
	w.Write(make([]byte, 90<<10-1000))
	w.Finish(true)
	if c.Admit(request(t, "GET", url+"/again"), resp, 90<<10, t0, t0, nil) == nil {
		t.Fatal("a stored response did not give its share of the budget back")
	}
	for _, w := range ws[1:] {
		w.Finish(false)
	}
	if n := c.inflight.Load(); n != 90<<10 {
		t.Fatalf("%d bytes still reserved; want one writer's 90 KiB", n)
	}

	// A body of unknown length takes the budget as it grows and is
	// dropped (never stored) when it cannot.
	c2 := New(cfg)
	big := c2.Admit(request(t, "GET", url+"/big"), resp, 1<<20-10<<10, t0, t0, nil)
	if big != nil {
		t.Fatal("a response larger than max_object admitted")
	}
	var chunked []*Writer
	for i := 0; i < 12; i++ {
		w := c2.Admit(request(t, "GET", fmt.Sprintf("%s/c%d", url, i)), resp, -1, t0, t0, nil)
		w.Write(make([]byte, 95<<10))
		chunked = append(chunked, w)
	}
	stored := 0
	for _, w := range chunked {
		if w.Stored() {
			stored++
		}
	}
	if stored == 12 || c2.inflight.Load() > 1<<20 {
		t.Fatalf("%d of 12 growing bodies kept, %d bytes reserved; want the budget (1 MiB) to hold", stored, c2.inflight.Load())
	}

	// An object larger than a sixteenth of the memory is kept (the
	// memory is one pool, not sixteen shares).
	cfg.MaxObject = 1 << 20
	c3 := New(cfg)
	w3 := c3.Admit(request(t, "GET", url+"/large"), resp, 512<<10, t0, t0, nil)
	if w3 == nil {
		t.Fatal("a response of an eighth of the memory was not admitted")
	}
	w3.Write(make([]byte, 512<<10))
	w3.Finish(true)
	if o, _ := c3.Lookup(request(t, "GET", url+"/large"), t0); o == nil || len(o.Body) != 512<<10 {
		t.Fatal("a response of an eighth of the memory was not kept")
	}
}

// TestHotCopiesBounded: hot copies (objects a fleet member fetched
// through the key's owner) take at most an eighth of the memory; past it
// one is relayed, not stored; purging one gives its share back; ordinary
// objects are not bounded by it.
func TestHotCopiesBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Memory = 8 << 20 // hot copies: 1 MiB
	c := New(cfg)
	resp := response(t, "200 OK", "Cache-Control: max-age=60")
	store := func(hot bool, name string) bool {
		r := request(t, "GET", url+"/"+name)
		var w *Writer
		if hot {
			w = c.AdmitHot(r, resp, 200<<10, t0, t0, nil)
		} else {
			w = c.Admit(r, resp, 200<<10, t0, t0, nil)
		}
		if w == nil {
			return false
		}
		w.Write(make([]byte, 200<<10))
		w.Finish(true)
		return true
	}
	n := 0
	for store(true, fmt.Sprintf("hot%d", n)) {
		n++
	}
	if n != 5 || c.store.hotBytes() > 1<<20 {
		t.Fatalf("%d hot copies of 200 KiB stored (%d bytes); want 5 within 1 MiB", n, c.store.hotBytes())
	}
	if !store(false, "plain") {
		t.Fatal("an ordinary object refused while hot copies are at their bound")
	}
	c.Purge([]byte(url + "/hot0"))
	if !store(true, "hot-again") {
		t.Fatal("a purged hot copy did not give its share back")
	}
	if c.AdmitHot(request(t, "GET", url+"/unknown-length"), resp, -1, t0, t0, nil) != nil {
		t.Fatal("a hot copy of unknown length was admitted")
	}
}

// TestReconfiguredKeepsEachViewsSettings: a reload's view of the cache
// has its own settings, while the view a request in flight holds keeps
// the old ones to its end; what either stores, the other finds (the
// stores are one).
func TestReconfiguredKeepsEachViewsSettings(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Memory = 4 << 20
	cfg.MaxObject = 96 << 10
	old := New(cfg)
	small := cfg
	small.MaxObject = 1 << 10
	next := old.Reconfigured(small)
	resp := response(t, "200 OK", "Cache-Control: max-age=60")
	if w := next.Admit(request(t, "GET", url+"/big"), resp, 8<<10, t0, t0, nil); w != nil {
		t.Fatal("the new view admitted an object over its max_object")
	}
	w := old.Admit(request(t, "GET", url+"/big"), resp, 8<<10, t0, t0, nil)
	if w == nil {
		t.Fatal("the old view refused an object within its own max_object")
	}
	w.Write(make([]byte, 8<<10))
	w.Finish(true)
	if o, _, _ := next.Find(request(t, "GET", url+"/big"), t0); o == nil {
		t.Fatal("what the old view stored is not found through the new one")
	}
	if old.MaxInMemory() != 96<<10 || next.MaxInMemory() != 1<<10 {
		t.Fatalf("max in memory: old view %d, new %d; want each its own", old.MaxInMemory(), next.MaxInMemory())
	}
}
