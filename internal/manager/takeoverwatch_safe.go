//go:build !vbcache_unsafe_takeoverwatch

package manager

// takeoverWatch is true in every real build: a failover makes active
// again the sources of moves into the failed node that were not committed
// (reactivate). The vbcache_unsafe_takeoverwatch build tag turns it off
// (takeoverwatch_unsafe.go), with internal/move's watchdog.
const takeoverWatch = true
