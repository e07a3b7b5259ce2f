//go:build vbcache_unsafe_markerlineage

package stream

// lineageChecks is false: markers may name lineage 0, as before the
// check (see lineage_safe.go). Never shipped.
const lineageChecks = false
