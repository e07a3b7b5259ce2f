//go:build vbcache_unsafe_catchup

package manager

// catchupLineage is false: a replica counts as caught up once its stream
// position reaches the source's high seqno, whatever the source holds
// (see catchup_safe.go). Never shipped.
const catchupLineage = false
