//go:build !vbcache_unsafe_emptysource

package move

// emptySourceLost is true in every real build: a dead move source that
// holds nothing while the target holds items counts as lost (recover.go,
// decide). The vbcache_unsafe_emptysource build tag turns it off
// (emptysource_unsafe.go).
const emptySourceLost = true
