//go:build vbcache_unsafe_syncreads

package server

// syncReads is false in a build with the vbcache_unsafe_syncreads tag: a
// deliberately broken node whose reads return writes no replica has yet
// under --sync-replication (issue 43's seventh hole), so that tests can
// show they catch it. Never ship it.
const syncReads = false
