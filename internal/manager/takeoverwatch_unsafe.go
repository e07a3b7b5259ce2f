//go:build vbcache_unsafe_takeoverwatch

package manager

// takeoverWatch is false in a build with the vbcache_unsafe_takeoverwatch
// tag: a deliberately broken manager whose failovers leave a vbucket
// moving into the failed node with no active (issue 43's second hole), so
// that tests can show they catch it. Never ship it.
const takeoverWatch = false
