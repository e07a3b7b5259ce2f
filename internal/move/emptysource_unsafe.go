//go:build vbcache_unsafe_emptysource

package move

// emptySourceLost is false in a build with the vbcache_unsafe_emptysource
// tag: a restarted source that Recover does not know by its process id
// reads as a dead source again, is set active empty and the target's copy
// dropped (issue 43), so that tests can show they catch it. Never ship it.
const emptySourceLost = false
