//go:build vbcache_unsafe_restartactives

package manager

// restartCountsActives is false in a build with the
// vbcache_unsafe_restartactives tag: the restart rule counts every copy a
// node holds, as it did before, so a restarted node made a replica
// within its first probe is never failed over (issue 43), and tests can
// show they catch it. Never ship it.
const restartCountsActives = false
