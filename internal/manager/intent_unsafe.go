//go:build vbcache_unsafe_intents

package manager

// intentsOn is false in a build with the vbcache_unsafe_intents tag: a
// deliberately broken manager whose failovers keep their promotions in
// memory only, so that a leader dying between its failover's commit and
// its promotions leaves the map naming replicas that are not active
// (issue 43's sixth hole), and tests can show they catch it. Never ship
// it.
const intentsOn = false
