//go:build !vbcache_unsafe_bestreplica

package manager

// promoteBest is true in every real build: a failover promotes, per
// vbucket, the live replica that holds the most of the failed active's
// history (bestReplica). The vbcache_unsafe_bestreplica build tag turns
// it off (bestreplica_unsafe.go), so that tests can show they catch its
// absence.
const promoteBest = true
