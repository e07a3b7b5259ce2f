//go:build !vbcache_unsafe_leaseterms

package server

// leaseTerms is true in every real build: a node judges each peer's
// manager lease by that peer's own duration (LEASE_QUERY's answer), and
// takes its stored map's view once its own manager lease has ended
// (askPeers). The vbcache_unsafe_leaseterms build tag turns both off
// (lease_terms_unsafe.go).
const leaseTerms = true
