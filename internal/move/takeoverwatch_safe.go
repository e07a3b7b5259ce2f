//go:build !vbcache_unsafe_takeoverwatch

package move

// takeoverWatch is true in every real build: a TAKEOVER whose target stops
// answering, or whose caller abandons it, is given up (takeover). The
// vbcache_unsafe_takeoverwatch build tag turns it off
// (takeoverwatch_unsafe.go).
const takeoverWatch = true
