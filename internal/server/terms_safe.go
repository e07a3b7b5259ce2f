//go:build !vbcache_unsafe_terms

package server

// terms is true in every real build: a node refuses requests of a
// leader's term older than the newest it has seen (terms.go). The
// vbcache_unsafe_terms build tag turns it off (terms_unsafe.go).
const terms = true
