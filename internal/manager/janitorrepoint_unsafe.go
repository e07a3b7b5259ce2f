//go:build vbcache_unsafe_janitorrepoint

package manager

// janitorRepoints is false in a build with the
// vbcache_unsafe_janitorrepoint tag: a deliberately broken janitor that
// leaves a replica following the wrong node, or none, as it is (issue
// 43), so that tests show they catch it. Never ship it.
const janitorRepoints = false
