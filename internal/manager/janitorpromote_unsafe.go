//go:build vbcache_unsafe_janitorpromote

package manager

// janitorPromotes is false: the janitor leaves such a vbucket to a
// failover (see janitorpromote_safe.go). Never shipped.
const janitorPromotes = false
