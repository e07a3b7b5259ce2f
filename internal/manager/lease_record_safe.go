//go:build !vbcache_unsafe_leaserecord

package manager

// leaseRecording is true in every real build: failovers wait by the
// longest lease any leader may have granted (lease_record.go). The
// vbcache_unsafe_leaserecord build tag turns it off
// (lease_record_unsafe.go).
const leaseRecording = true
