//go:build vbcache_unsafe_leaserecord

package manager

// leaseRecording is false in a build with the vbcache_unsafe_leaserecord
// tag: a deliberately broken manager whose failovers wait by its own
// --lease only, however long the leases an earlier leader granted (issue
// 43's third hole), so that tests can show they catch it. Never ship it.
const leaseRecording = false
