//go:build vbcache_unsafe_restartmidrb

package manager

// restartMidRebalance is false in a build with the
// vbcache_unsafe_restartmidrb tag: a deliberately broken manager that
// waits for any rebalance to end before it counts a restarted node's
// answers (issue 43: a rebalance waiting for that node never ended, and
// its actives were served by no one), so that tests show they catch it.
// Never ship it.
const restartMidRebalance = false
