//go:build vbcache_unsafe_reactivatehistory

package manager

// reactivateHistory is false: a failover of a move's target makes the
// source's dead or pending copy active again whatever it holds, a
// restarted process's empty copy too (see reactivatehistory_safe.go).
// Never shipped.
const reactivateHistory = false
