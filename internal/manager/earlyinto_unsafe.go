//go:build vbcache_unsafe_earlyinto

package manager

// earlyInto is false: the moves into the failed node are read once the
// failover holds opMu, when the rebalance may have cleared them (see
// earlyinto_safe.go). Never shipped.
const earlyInto = false
