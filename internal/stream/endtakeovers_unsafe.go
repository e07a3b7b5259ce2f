//go:build vbcache_unsafe_endtakeovers

package stream

// endTakeovers is false in a build with the vbcache_unsafe_endtakeovers
// tag: a deliberately broken node whose takeovers out of it go on after a
// SET_VBUCKET there (issue 43: a failover made a paused move target's
// source active again, and the held-up handover then turned it dead, or
// made the target active beside it), so that tests show they catch it.
// Never ship it.
const endTakeovers = false
