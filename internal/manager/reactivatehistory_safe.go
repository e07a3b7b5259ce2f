//go:build !vbcache_unsafe_reactivatehistory

package manager

// reactivateHistory is true in every real build: a failover of a move's
// target makes the source's dead or pending copy active again only when
// that copy has a lineage (reactivate). The vbcache_unsafe_reactivatehistory
// build tag turns it off (reactivatehistory_unsafe.go).
const reactivateHistory = true
