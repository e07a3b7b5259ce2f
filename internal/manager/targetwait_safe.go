//go:build !vbcache_unsafe_targetwait

package manager

// targetWait is false in every real build: nothing the manager does
// waits for a node it is failing over (pushConfigAcks, the moves'
// move.Options.TargetLost). The vbcache_unsafe_targetwait build tag turns
// that off (targetwait_unsafe.go).
const targetWait = false
