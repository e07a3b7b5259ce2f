//go:build !vbcache_unsafe_catchup

package manager

// catchupLineage is true in every real build: a replica counts as caught
// up only with a source that has the vbucket's history (waitCaughtUp). The
// vbcache_unsafe_catchup build tag turns it off (catchup_unsafe.go).
const catchupLineage = true
