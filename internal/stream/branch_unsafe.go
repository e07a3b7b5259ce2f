//go:build vbcache_unsafe_branch

package stream

// branching is false in a build with the vbcache_unsafe_branch tag: a
// deliberately broken node whose promoted copies keep their lineage and
// whose producers let a consumer resume any position of the current
// lineage (issue 43's lineage hole), so that tests can show they catch it.
// Never ship it.
const branching = false
