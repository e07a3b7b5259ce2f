//go:build vbcache_unsafe_incarnation

package manager

// incarnations is false in a build with the vbcache_unsafe_incarnation
// tag: a restarted node vouches for its peers as if it had been granted
// nothing, and the manager credits it with its predecessor's lease
// (issue 43's fourth hole), so that tests can show they catch it. Never
// ship it.
const incarnations = false
