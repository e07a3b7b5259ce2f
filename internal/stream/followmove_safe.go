//go:build !vbcache_unsafe_followmove

package stream

// followMoves is true in every real build: a source that handed a
// vbucket over ends its replication streams of it naming the target
// (EndMoved), and a replica fed from it follows the target at once,
// without waiting for a manager to point it there (a leader paused
// between a move's commit and its replicas' REPLICATE held every
// --sync-replication write of the vbucket up to then). The
// vbcache_unsafe_followmove build tag turns it off (followmove_unsafe.go).
const followMoves = true
