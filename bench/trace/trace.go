// Package trace reads and makes sized request traces, and replays them
// through simulated caches (sim.go) and through a running proxy
// (replay.go), so that a cache's hit ratios can be held against the
// textbook policies over the same bytes.
//
// This file holds the traces: reading one from a file, giving sizes to
// the keys of a trace that has none, and generating Zipf traces with
// scans.
package trace

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
)

// Request is one request of a trace: the object asked for and its size in
// bytes.
type Request struct {
	ID   uint64
	Size int64
}

// Trace is a trace's requests, in order, and where their sizes came from.
type Trace struct {
	Name     string
	Requests []Request
	// Sized says the sizes are the trace's own; otherwise SizeOf gave
	// them, with Seed.
	Sized bool
	Seed  uint64
}

// Open reads the trace at path (gzip when it ends in .gz); see Read.
func Open(path string, seed uint64) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	t, err := Read(r, seed)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t.Name = path
	return t, nil
}

// Read reads a trace, one request per line: "time id size" (a sized
// trace), or "seq id" (keys only: each id's size is SizeOf(id, seed)).
// Every line must have the same number of fields; ids and sizes are
// decimal, and a size must be positive.
func Read(r io.Reader, seed uint64) (*Trace, error) {
	t := &Trace{Seed: seed}
	sc := bufio.NewScanner(r)
	fieldsPer := 0
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if fieldsPer == 0 {
			fieldsPer = len(f)
			if fieldsPer != 2 && fieldsPer != 3 {
				return nil, fmt.Errorf("line %d: %d fields; want \"time id size\" or \"seq id\"", line, fieldsPer)
			}
			t.Sized = fieldsPer == 3
		}
		if len(f) != fieldsPer {
			return nil, fmt.Errorf("line %d: %d fields where the first line has %d", line, len(f), fieldsPer)
		}
		id, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: id %q is not a decimal number", line, f[1])
		}
		size := SizeOf(id, seed)
		if t.Sized {
			size, err = strconv.ParseInt(f[2], 10, 64)
			if err != nil || size <= 0 {
				return nil, fmt.Errorf("line %d: size %q is not a positive decimal number", line, f[2])
			}
		}
		t.Requests = append(t.Requests, Request{ID: id, Size: size})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(t.Requests) == 0 {
		return nil, fmt.Errorf("no requests")
	}
	return t, nil
}

// Size bounds of SizeOf.
const (
	sizeMedian = 8 << 10
	sizeSigma  = 1.6
	sizeMax    = 16 << 20
)

// SizeOf is the size given to id in a trace without sizes: log-normal
// (median 8 KiB, σ 1.6: most objects small, a few megabytes), at least
// 100 bytes and at most 16 MiB, the same for an id and a seed every time.
func SizeOf(id, seed uint64) int64 {
	r := rand.New(rand.NewPCG(id, seed^0x9e3779b97f4a7c15))
	s := math.Exp(math.Log(sizeMedian) + sizeSigma*r.NormFloat64())
	return int64(min(max(s, 100), sizeMax))
}

// Zipf makes a trace of n requests over objects ids with Zipf popularity
// (exponent s > 1, the most popular ids first), sized by SizeOf; every
// scanEvery requests (0: never), a scan of scanLen ids never asked for
// before is inserted, as a crawler or a backup would.
func Zipf(n, objects int, s float64, scanEvery, scanLen int, seed uint64) *Trace {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	z := rand.NewZipf(r, s, 1, uint64(objects-1))
	t := &Trace{Name: fmt.Sprintf("zipf(n=%d, objects=%d, s=%g, scan %d every %d)", n, objects, s, scanLen, scanEvery), Seed: seed}
	next := uint64(objects)
	for i := 0; i < n; i++ {
		if scanEvery > 0 && i > 0 && i%scanEvery == 0 {
			for j := 0; j < scanLen; j++ {
				t.Requests = append(t.Requests, Request{ID: next, Size: SizeOf(next, seed)})
				next++
			}
		}
		id := z.Uint64()
		t.Requests = append(t.Requests, Request{ID: id, Size: SizeOf(id, seed)})
	}
	return t
}

// Footprint is the bytes of the trace's distinct objects (an id asked
// with several sizes counts with its largest).
func (t *Trace) Footprint() (objects int, bytes int64) {
	seen := map[uint64]int64{}
	for _, q := range t.Requests {
		seen[q.ID] = max(seen[q.ID], q.Size)
	}
	for _, s := range seen {
		bytes += s
	}
	return len(seen), bytes
}
