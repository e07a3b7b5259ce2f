//go:build vbcache_unsafe_janitor

package manager

// janitorOn is false in a build with the vbcache_unsafe_janitor tag: a
// deliberately broken manager without a janitor, so that a vbucket a lost
// TAKEOVER answer left with no active, a stray active and an orphan copy
// stay as they are, and tests show they catch it. Never ship it.
const janitorOn = false
