package trace

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

func reqs(ids []uint64, size int64) *Trace {
	t := &Trace{Sized: true}
	for _, id := range ids {
		t.Requests = append(t.Requests, Request{ID: id, Size: size})
	}
	return t
}

func TestReadBothFormats(t *testing.T) {
	tr, err := Read(strings.NewReader("0 7\n1 9\n2 7\n"), 1)
	if err != nil || tr.Sized || len(tr.Requests) != 3 || tr.Requests[0].Size != SizeOf(7, 1) || tr.Requests[2].Size != tr.Requests[0].Size {
		t.Fatalf("keys only: %+v %v", tr, err)
	}
	tr, err = Read(strings.NewReader("10 7 500\n11 9 20\n"), 1)
	if err != nil || !tr.Sized || tr.Requests[1] != (Request{ID: 9, Size: 20}) {
		t.Fatalf("sized: %+v %v", tr, err)
	}
	for in, want := range map[string]string{
		"1 2 3\n4 5\n": "line 2: 2 fields where the first line has 3",
		"1 2 x\n":      `line 1: size "x" is not a positive`,
		"1 2 0\n":      `line 1: size "0" is not a positive`,
		"1 a\n":        `line 1: id "a" is not a decimal`,
		"1 2 3 4\n":    "line 1: 4 fields",
		"\n\n":         "no requests",
		"0 1\n1 -2\n":  `line 2: id "-2"`,
		"1 2 3\n\n1 2": "line 3: 2 fields",
	} {
		if _, err := Read(strings.NewReader(in), 1); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Read(%q): %v; want %q", in, err, want)
		}
	}
}

func TestSizeOfIsHeavyTailedAndStable(t *testing.T) {
	var small, big int
	for id := uint64(0); id < 10000; id++ {
		s := SizeOf(id, 42)
		if s != SizeOf(id, 42) || s < 100 || s > sizeMax {
			t.Fatalf("SizeOf(%d) = %d, then %d", id, s, SizeOf(id, 42))
		}
		if s <= sizeMedian {
			small++
		}
		if s > 1<<20 {
			big++
		}
	}
	if small < 4500 || small > 5500 || big < 5 || big > 200 {
		t.Fatalf("of 10000 sizes, %d at most the median and %d over 1 MiB", small, big)
	}
	if SizeOf(1, 1) == SizeOf(1, 2) && SizeOf(2, 1) == SizeOf(2, 2) {
		t.Fatal("the seed changes nothing")
	}
}

func TestLRUCountsExactly(t *testing.T) {
	// Room for 3 objects of 10 bytes: 1 2 3 1 4 (evicts 2) 2 (miss,
	// evicts 3) 1 (hit).
	r := Simulate(NewLRU(30), reqs([]uint64{1, 2, 3, 1, 4, 2, 1}, 10))
	if r.Hits != 2 || r.Requests != 7 || r.HitBytes != 20 || r.Bytes != 70 {
		t.Fatalf("LRU: %+v; want 2 hits of 7", r)
	}
	// Too large to keep is never a hit.
	if r := Simulate(NewLRU(5), reqs([]uint64{1, 1}, 10)); r.Hits != 0 {
		t.Fatalf("an object larger than the cache hit: %+v", r)
	}
}

func TestGDSFKeepsSmallObjects(t *testing.T) {
	// Ten small objects asked for in turn and a large one between turns
	// that would push two of them out: LRU loses the small ones each
	// turn, GDSF gives up the large one.
	tr := &Trace{}
	for round := 0; round < 20; round++ {
		for id := uint64(1); id <= 10; id++ {
			tr.Requests = append(tr.Requests, Request{ID: id, Size: 10})
		}
		tr.Requests = append(tr.Requests, Request{ID: 100 + uint64(round%2), Size: 30})
	}
	lru, gdsf := Simulate(NewLRU(110), tr), Simulate(NewGDSF(110), tr)
	if gdsf.Hits <= lru.Hits || gdsf.Hits < 180 {
		t.Fatalf("GDSF %d hits, LRU %d; want GDSF to keep the ten small objects (>= 180 hits)", gdsf.Hits, lru.Hits)
	}
}

func TestS3FIFOResistsScans(t *testing.T) {
	// A hot set of 5 objects asked for again and again, with a scan of
	// 20 objects never asked for again after each pass: LRU loses the
	// hot set to every scan, S3-FIFO keeps it in its main FIFO.
	tr := &Trace{}
	next := uint64(1000)
	for round := 0; round < 30; round++ {
		for k := 0; k < 3; k++ {
			for id := uint64(1); id <= 5; id++ {
				tr.Requests = append(tr.Requests, Request{ID: id, Size: 10})
			}
		}
		for j := 0; j < 20; j++ {
			tr.Requests = append(tr.Requests, Request{ID: next, Size: 10})
			next++
		}
	}
	lru, s3 := Simulate(NewLRU(100), tr), Simulate(NewS3FIFO(100), tr)
	if s3.Hits < lru.Hits+100 {
		t.Fatalf("S3-FIFO %d hits, LRU %d; want S3-FIFO to keep the hot set through the scans", s3.Hits, lru.Hits)
	}
	// Everything fits: every policy misses each object once only.
	small := reqs([]uint64{1, 2, 3, 1, 2, 3, 1, 2, 3}, 10)
	for _, p := range Policies(1000) {
		if r := Simulate(p, small); r.Hits != 6 {
			t.Errorf("%s with room for everything: %d hits of 9; want 6", p.Name(), r.Hits)
		}
	}
}

func TestZipfTraceHasScansAndSkew(t *testing.T) {
	tr := Zipf(10000, 1000, 1.1, 1000, 50, 7)
	if len(tr.Requests) != 10000+9*50 {
		t.Fatalf("%d requests; want 10450", len(tr.Requests))
	}
	count := map[uint64]int{}
	for _, q := range tr.Requests {
		count[q.ID]++
	}
	if count[0] < 500 || count[999] > 20 {
		t.Fatalf("the most popular id asked %d times, id 999 %d times: no skew", count[0], count[999])
	}
	if objects, _ := tr.Footprint(); objects <= 450 {
		t.Fatalf("%d distinct objects: the scans are missing", objects)
	}
}

// toyProxy is a forward proxy that keeps every answer forever: the
// replay's ratios through it are known exactly.
func toyProxy(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	kept := map[string][]byte{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u := r.URL.String()
		mu.Lock()
		b, ok := kept[u]
		mu.Unlock()
		if !ok {
			resp, err := http.Get(u)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			b, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			mu.Lock()
			kept[u] = b
			mu.Unlock()
		}
		w.Write(b)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func TestReplayCountsWhatReachedTheOrigin(t *testing.T) {
	o, err := StartOrigin()
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	tr := &Trace{Requests: []Request{{1, 100}, {2, 70000}, {1, 100}, {3, 5}, {2, 70000}, {1, 100}}}
	r, err := Replay(tr, o, toyProxy(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Wrong != 0 || r.Requests != 6 || r.OriginRequests != 3 || r.OriginBytes != 70105 || r.Bytes != 140305 {
		t.Fatalf("replay: %+v", r)
	}
	if r.ObjectHitRatio() != 0.5 {
		t.Fatalf("object hit ratio %v; want 0.5", r.ObjectHitRatio())
	}
	// The origin serves exactly the size the URL names.
	resp, err := http.Get("http://" + o.Addr + "/o/9/12345")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if len(b) != 12345 || !bytes.HasPrefix(b, []byte("0123456789abcdef")) {
		t.Fatalf("the origin served %d bytes for a 12345-byte object", len(b))
	}
}
