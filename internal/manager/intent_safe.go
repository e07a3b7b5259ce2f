//go:build !vbcache_unsafe_intents

package manager

// intentsOn is true in every real build: a failover records its
// promotions in etcd with its map, and a successor finishes them
// (intent.go). The vbcache_unsafe_intents build tag turns it off
// (intent_unsafe.go).
const intentsOn = true
