//go:build !vbcache_unsafe_endtakeovers

package stream

// endTakeovers is true in every real build: SET_VBUCKET and DEL_VBUCKET
// on a move's source end its takeovers (EndTakeoverFrom). The
// vbcache_unsafe_endtakeovers build tag turns that off
// (endtakeovers_unsafe.go).
const endTakeovers = true
