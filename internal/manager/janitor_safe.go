//go:build !vbcache_unsafe_janitor

package manager

// janitorOn is true in every real build: the leader's janitor repairs
// what no other duty will (janitor.go). The vbcache_unsafe_janitor build
// tag turns it off (janitor_unsafe.go).
const janitorOn = true
