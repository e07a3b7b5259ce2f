//go:build !vbcache_unsafe_rollback

package stream

// rollbackInPlace is true in every real build: a consumer that ran past
// its producer's branch point rolls back to it (StatusRollback), keeping
// what came before, instead of being rebuilt. The vbcache_unsafe_rollback
// build tag turns it off (rollback_unsafe.go): the copy is rebuilt with a
// reset backfill, as before.
const rollbackInPlace = true
