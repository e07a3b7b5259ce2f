//go:build !vbcache_nofence

package server

// fencing is true in every real build: a node serves its active vbuckets
// only while it holds a lease, and takes a newer map's view when it holds
// no manager's lease (lease.go). The vbcache_nofence build tag turns it
// off (lease_nofence.go).
const fencing = true
