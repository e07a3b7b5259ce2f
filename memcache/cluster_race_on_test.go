//go:build race

package memcache

// raceEnabled reports whether the race detector is on; tests that would
// take minutes under it shrink.
const raceEnabled = true
