//go:build !vbcache_unsafe_earlyinto

package manager

// earlyInto is true in every real build: a failover reads the moves into
// the failed node before it marks the node failing, which ends them, and
// the rebalance with them (failover). The vbcache_unsafe_earlyinto build
// tag turns it off (earlyinto_unsafe.go): it reads them only once it
// holds opMu, as before.
const earlyInto = true
