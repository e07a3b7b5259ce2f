//go:build vbcache_unsafe_bestreplica

package manager

// promoteBest is false in a build with the vbcache_unsafe_bestreplica tag:
// a deliberately broken manager whose failovers promote the first live
// replica in row order, however far behind the others it is (issue 43's
// first hole), so that tests can show they catch it. Never ship it.
const promoteBest = false
