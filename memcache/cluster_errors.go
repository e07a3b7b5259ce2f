package memcache

import "errors"

var (
	// ErrTemporaryFailure means a server answered TMPFAIL (binary status
	// 0x86): it could not serve the request now but may soon, as a vbcache
	// node does for a vbucket that stays pending (being taken over) longer
	// than its park timeout. A cluster client (NewCluster) refreshes the
	// map and retries with backoff, as for ErrNotMyVBucket, and returns an
	// error wrapping ErrTemporaryFailure only when its tries are used up.
	// Such errors also wrap ErrServerError.
	ErrTemporaryFailure = errors.New("memcache: temporary failure")

	// ErrSyncWriteAmbiguous means a write was applied on its vbucket's
	// active, which could not confirm in time that its replicas have it
	// (a vbcache node under --sync-replication; Couchbase's
	// SyncWriteAmbiguous, binary status 0xa3): a failover may still lose
	// it, and nothing applies it again later. Such errors also wrap
	// ErrServerError. A client does not send the write again.
	ErrSyncWriteAmbiguous = errors.New("memcache: sync write ambiguous")

	// errTemporaryFailureAnswer is one server's TMPFAIL answer. It is a
	// server error, as every other status from 0x82 up.
	errTemporaryFailureAnswer = &serverError{msg: "server answered TMPFAIL (temporary failure)",
		wraps: errors.Join(ErrTemporaryFailure, ErrServerError)}
)
