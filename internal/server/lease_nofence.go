//go:build vbcache_nofence

package server

// fencing is false in a build with the vbcache_nofence tag: a deliberately
// broken node that serves its active vbuckets without a lease and keeps
// them whatever newer map it learns, so that the fault tests can show that
// their checker catches it (test/faults, broken_test.go). Never ship it.
const fencing = false
