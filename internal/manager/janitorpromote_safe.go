//go:build !vbcache_unsafe_janitorpromote

package manager

// janitorPromotes is true in every real build: where the map's active of
// a vbucket answers that it holds less than a replica (no copy, one with
// no lineage, or fewer mutations of the same history) and no member has
// it active, the janitor promotes the replica that holds the most. The
// vbcache_unsafe_janitorpromote build tag turns it off
// (janitorpromote_unsafe.go): it only says so, as before.
const janitorPromotes = true
