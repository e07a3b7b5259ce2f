//go:build !vbcache_unsafe_syncreads

package server

// syncReads is true in every real build: under --sync-replication a read
// waits until its vbucket's writes are replicated (leaveVB). The
// vbcache_unsafe_syncreads build tag turns it off (syncreads_unsafe.go).
const syncReads = true
