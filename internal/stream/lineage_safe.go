//go:build !vbcache_unsafe_markerlineage

package stream

// lineageChecks is true in every real build: no snapshot marker names
// lineage 0. A producer whose vbucket was deleted (Forget) after it read
// a batch of the log starts the stream over rather than send the batch
// under no lineage, and a consumer refuses such a marker. The
// vbcache_unsafe_markerlineage build tag turns both off
// (lineage_unsafe.go).
const lineageChecks = true
