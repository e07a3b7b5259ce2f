//go:build !vbcache_unsafe_janitorrepoint

package manager

// janitorRepoints is true in every real build: the janitor points a
// replica that does not follow its row's source at it again. The
// vbcache_unsafe_janitorrepoint build tag turns that off
// (janitorrepoint_unsafe.go).
const janitorRepoints = true
