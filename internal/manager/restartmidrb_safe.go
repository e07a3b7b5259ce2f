//go:build !vbcache_unsafe_restartmidrb

package manager

// restartMidRebalance is true in every real build: a node that showed a
// new incarnation is failed over while a rebalance runs (restart.go). The
// vbcache_unsafe_restartmidrb build tag turns that off
// (restartmidrb_unsafe.go).
const restartMidRebalance = true
