package main

// This file holds the origin's objects: each cacheable object has a size
// and, at any time, a version; its body is a pure function of both, so a
// client checks any answer byte for byte from its ETag alone (I1). An
// uncacheable answer's body is a function of the exchange that asked it,
// so an answer meant for another client is seen at once.

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// objectSize is object n's body size: 100 bytes to 48 KiB, within what a
// fleet member reads whole before relaying (max_object_in_memory).
func objectSize(n int) int { return 100 + int(mix(7, uint64(n))%(48<<10)) }

// versionEvery is how long an object's version lasts.
const versionEvery = 4 * time.Second

// versionAt is object versions' number at elapsed time since the start.
func versionAt(elapsed time.Duration) int { return 1 + int(elapsed/versionEvery) }

// body is the content of path at version (or, uncacheable, for exchange
// id in place of a version): size bytes that differ for every path and
// version.
func body(path string, version uint64, size int) []byte {
	b := make([]byte, size)
	var x uint64
	for _, c := range path {
		x = x*131 + uint64(c)
	}
	seed := mix(x, version)
	for i := 0; i < size; i += 8 {
		w := mix(seed, uint64(i))
		for j := 0; j < 8 && i+j < size; j++ {
			b[i+j] = 'a' + byte(w>>(8*j))%26
		}
	}
	return b
}

func etag(version int) string { return `"v` + strconv.Itoa(version) + `"` }

// versionOf reads the version from an ETag (0: not one of ours).
func versionOf(tag string) uint64 {
	v, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(tag, `"v`), `"`), 10, 64)
	if err != nil {
		return 0
	}
	return v
}

func cachedPath(n int) string { return fmt.Sprintf("/c/%d", n) }
