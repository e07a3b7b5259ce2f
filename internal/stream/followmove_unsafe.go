//go:build vbcache_unsafe_followmove

package stream

// followMoves is false: replicas wait for a manager's REPLICATE after a
// move, as before (see followmove_safe.go). Never shipped.
const followMoves = false
