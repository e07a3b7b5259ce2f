//go:build !vbcache_unsafe_restartactives

package manager

// restartCountsActives is true in every real build: the restart rule
// (restart.go) counts the actives a node holds, not every copy. The
// vbcache_unsafe_restartactives build tag turns it off
// (restartactives_unsafe.go).
const restartCountsActives = true
