//go:build vbcache_unsafe_targetwait

package move

// targetWait is true in a build with the vbcache_unsafe_targetwait tag: a
// deliberately slow move whose recovery waits out Settle for a target
// that the caller is failing over, holding the failover up (issue 43's
// second item, "no longer than the lease plus --failover-after plus a
// second"), so that tests can show they catch it. Never ship it.
const targetWait = true
