//go:build vbcache_unsafe_syncoutsiders

package stream

// syncSkipsOutsiders is false in a build with the
// vbcache_unsafe_syncoutsiders tag: under --sync-replication a replica
// failed over while paused holds every write of its vbuckets up until it
// resumes, as before issue 43's fix, so that tests can show they catch
// it. Never ship it.
const syncSkipsOutsiders = false
