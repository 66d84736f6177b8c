//go:build race

package forwarding

// The race detector changes allocation (sync.Pool drops items at random),
// so allocation counts are asserted only without it.
const raceEnabled = true
