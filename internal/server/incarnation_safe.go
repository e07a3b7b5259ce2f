//go:build !vbcache_unsafe_incarnation

package server

// incarnations is true in every real build: a restarted node (a new
// process at a member's address) vouches for no one until it is granted
// a lease, and the manager forgets what the node's previous incarnation
// held. The vbcache_unsafe_incarnation build tag turns it off
// (incarnation_unsafe.go).
const incarnations = true
