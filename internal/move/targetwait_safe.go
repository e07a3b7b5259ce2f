//go:build !vbcache_unsafe_targetwait

package move

// targetWait is false in every real build: recovery stops waiting for a
// target that Options.TargetLost says is being failed over (settle). The
// vbcache_unsafe_targetwait build tag turns that off
// (targetwait_unsafe.go).
const targetWait = false
