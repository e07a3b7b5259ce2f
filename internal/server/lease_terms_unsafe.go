//go:build vbcache_unsafe_leaseterms

package server

// leaseTerms is false in a build with the vbcache_unsafe_leaseterms tag: a
// deliberately broken node that judges its peers' leases by its own
// duration and keeps serving, on its peers' word, vbuckets that a map it
// stored while leased gives to others (issue 43's third hole), so that
// tests can show they catch it. Never ship it.
const leaseTerms = false
