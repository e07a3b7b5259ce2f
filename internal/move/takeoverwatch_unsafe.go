//go:build vbcache_unsafe_takeoverwatch

package move

// takeoverWatch is false in a build with the vbcache_unsafe_takeoverwatch
// tag: a deliberately broken move that waits for a silent target's
// TAKEOVER answer until MoveTimeout, and ignores Options.Abandon (issue
// 43's second hole), so that tests can show they catch it. Never ship it.
const takeoverWatch = false
