//go:build vbcache_unsafe_sourcehistory

package move

// sourceHistory is false: R4 sets a dead source active again whatever it
// holds, as before (see sourcehistory_safe.go). Never shipped.
const sourceHistory = false
