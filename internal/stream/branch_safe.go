//go:build !vbcache_unsafe_branch

package stream

// branching is true in every real build: a promoted copy starts a new
// branch of its vbucket's history, and a consumer resumes only a history
// that is a prefix of its producer's (Log.Resume). The vbcache_unsafe_branch
// build tag turns it off (branch_unsafe.go).
const branching = true
