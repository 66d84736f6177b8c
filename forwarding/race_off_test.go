//go:build !race

package forwarding

const raceEnabled = false
