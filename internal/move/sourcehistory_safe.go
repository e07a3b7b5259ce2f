//go:build !vbcache_unsafe_sourcehistory

package move

// sourceHistory is true in every real build: a dead move source with no
// lineage for the vbucket is never set active again (recover.go,
// decide). The vbcache_unsafe_sourcehistory build tag turns it off
// (sourcehistory_unsafe.go).
const sourceHistory = true
