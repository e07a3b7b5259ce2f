//go:build vbcache_unsafe_rollback

package stream

// rollbackInPlace is false: a consumer that ran past its producer's
// branch point is rebuilt (see rollback_safe.go). Never shipped.
const rollbackInPlace = false
