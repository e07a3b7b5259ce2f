//go:build vbcache_unsafe_targetwait

package manager

// targetWait is true in a build with the vbcache_unsafe_targetwait tag: a
// deliberately slow manager whose config pushes and move recoveries wait
// out their timeouts for a node it is failing over, holding the failover
// up (issue 43's second item: a paused move target left its vbuckets
// unserved for 8-12 s), so that tests can show they catch it. Never ship
// it.
const targetWait = true
