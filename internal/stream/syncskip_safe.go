//go:build !vbcache_unsafe_syncoutsiders

package stream

// syncSkipsOutsiders is true in every real build: Replicated does not
// wait for a stream to a node the map no longer names for the vbucket.
// The vbcache_unsafe_syncoutsiders build tag turns it off
// (syncskip_unsafe.go).
const syncSkipsOutsiders = true
