//go:build vbcache_unsafe_terms

package server

// terms is false in a build with the vbcache_unsafe_terms tag: a
// deliberately broken node that serves a deposed leader's requests
// (issue 43's fifth hole), so that tests can show they catch it. Never
// ship it.
const terms = false
