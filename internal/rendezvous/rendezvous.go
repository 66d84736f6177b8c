// Package rendezvous holds the hashing behind weighted rendezvous
// (highest random weight) choices: CARP and sourcehash among parents
// (selection) and the owner of a cache key among fleet members (fleet).
// Each candidate's name is hashed once (Hash); a key's score on it is
// Score(Mix(keyHash ^ nameHash), weight), and the highest score wins. A
// candidate that comes or goes moves only the keys it scores highest on.
package rendezvous

import "math"

// Hash is FNV-1a of s, inlined (no hash.Hash allocation on the request
// path).
func Hash[T string | []byte](s T) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// Mix is splitmix64's finaliser: every input bit affects every output
// bit (FNV's low bits are weak).
func Mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Unit maps a mixed hash to (0, 1).
func Unit(h uint64) float64 { return (float64(h>>11) + 0.5) / (1 << 53) }

// Score is a candidate's weighted score for a mixed hash h: weight /
// -ln(u), u = Unit(h). The highest wins.
func Score(h uint64, weight float64) float64 { return weight / -math.Log(Unit(h)) }
