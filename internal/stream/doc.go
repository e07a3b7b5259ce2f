// Package stream moves a vbucket's items between cache nodes: replication
// (a replica fed by the active, or by another replica) and takeover (a
// vbucket handed from one node to another without a wrong answer, DESIGN.md
// §3). It is modelled on Couchbase's DCP, with vbcache's own packet
// layouts.
//
// # Sequence numbers and the log
//
// Every mutation of a vbucket (a store, touch, delete or expiry; not an
// eviction, a flush or a dropped vbucket) gets the next sequence number of
// that vbucket. The store reports mutations to the Log (store.Observer)
// under the item's shard lock, so one key's mutations are numbered in the
// order they happened.
//
// # Branches: the failover log
//
// A vbucket's history is a chain of branches (DESIGN.md §5), kept newest
// first in its failover log (Log.FailoverLog, at most 16, as DCP's): a
// branch is a random 64-bit uuid and the sequence number it began after.
// A copy's lineage is its newest branch. A history gets its first branch
// when a stream of it first opens; a copy turned active by SET_VBUCKET
// (a replica promoted at a failover, where the old active may have
// written past it) starts a new branch at its last sequence number
// before it takes a write (Node.NewBranch); DEL_VBUCKET forgets it all.
// A takeover's target starts none: it has everything the source wrote.
//
// A consumer resumes with its position (uuid, seqno). The producer looks
// the uuid up in its failover log (Log.Resume): the branch ended here
// where the next newer one began (or at the last sequence number, for
// the newest). A position at or before that end is a prefix of this
// history, and the stream resumes there. A position past it ran past the
// branch point: the consumer holds mutations this copy never had (a
// replica of an old active that got further than the replica promoted),
// so it must not resume; it starts over with a reset backfill, counted in
// "stats streams" branch_rebuilds. An unknown uuid starts over too. DCP
// would roll such a consumer back to the branch point instead, dropping
// only what came after it; that is not done here (Not implemented). The
// answer to STREAM_REQ carries the producer's failover log, which the
// consumer takes as its own, so a replica promoted later knows the
// branches its copy shares with the others.
//
// For a vbucket that is being streamed, the Log keeps a ring of its recent
// mutations: sequence number, kind, key and size, never the value. A
// producer reads the key's current value from the store when it sends, so
// the ring costs a few dozen bytes per mutation, and a key changed again
// later is simply sent again for its later entry: the consumer always ends
// where the source is. The ring grows up to a budget (--stream-log-bytes,
// 1 MiB per vbucket by default) and then drops its oldest entries; a stream
// whose position was dropped starts over with a reset backfill. A slow
// consumer therefore costs bounded memory and never slows the node's
// clients: writers only append to the ring.
//
// # A stream
//
// A consumer connects to the producer's ordinary port and sends OPEN
// (0x50); the server hands the connection to ServeProducer. For each
// vbucket the consumer sends STREAM_REQ (0x53) with its position (uuid,
// seqno). The producer answers and then sends, as requests on the same
// connection:
//
//   - a backfill, when the consumer cannot resume: a SNAPSHOT_MARKER with
//     the disk and reset flags (the consumer drops its copy), every item
//     of the vbucket read from the store (the items referenced when the
//     backfill began; later changes come from the log), and an empty
//     marker that closes the snapshot;
//   - then, for ever, batches from the log: a marker [first, last] and a
//     MUTATION, DELETION or EXPIRATION per entry;
//   - STREAM_END with a reason when the stream stops.
//
// A replica node keeps one connection per source and adds or closes
// streams on it as vbuckets are given to it or taken away (STREAM_REQ,
// CLOSE_STREAM), so the other streams on it go on.
//
// The consumer applies each mutation to its store under the producer's
// sequence number and CAS (and raises its own CAS counter past it), so a
// replica's history is the active's and a chained replica can stream from
// it. It acknowledges bytes (BUFFER_ACK, 0x5d) as it applies them, and its
// position (SEQNO_ACK, 0x5f) each time a snapshot completes. A producer
// stops sending while 4 MiB are unacknowledged: flow control.
//
// # Takeover
//
// A takeover stream (STREAM_REQ flag 1) ends with the handover, run by the
// producer once the consumer has everything the log holds:
//
//  1. SET_STATE pending to the consumer; it answers once it has applied
//     everything before it (the connection is ordered).
//  2. The producer turns the vbucket dead with vbucket.Table.SetFenced: no
//     new request is admitted, and it waits until every write admitted
//     before has finished. From here this node answers NOT_MY_VBUCKET.
//  3. It sends the mutations logged since step 1.
//  4. SET_STATE active; the consumer turns active and answers.
//  5. STREAM_END ok.
//
// So the target turns active only after the source stopped serving, and
// has every write the source acknowledged: never two actives, no lost
// acknowledged write. If the connection breaks before step 4 the source
// turns itself back active (the consumer was never told to serve). If the
// consumer breaks off after step 1 it keeps its copy as a replica; if no
// answer to step 4 arrives the source stays dead. internal/move's rules
// resolve those two cases. A consumer that breaks off before step 1
// drops its copy, unless it was the vbucket's replica fed from the
// source when the takeover began: that copy stays, a replica no longer
// fed, since it may be the only one left if the source is gone.
//
// SET_VBUCKET or DEL_VBUCKET on either end ends the takeover there
// (Node.AbortTakeover on the target, Node.EndTakeoverFrom on the source,
// which closes the takeover's connection and waits for it): an
// operator's or a failover's word overrides a handover, which would
// otherwise go on when a silent target answered again.
//
// # Packets
//
// Binary protocol framing (24-byte header). vbucket in the header, opaque
// = the stream's id chosen by the consumer. Extras, big-endian:
//
//	OPEN            0x50  c→p  4: flags (0); key: consumer name
//	CLOSE_STREAM    0x52  c→p  —
//	STREAM_REQ      0x53  c→p  4 flags (1 = takeover), 8 start seqno, 8 uuid;
//	                           answered with the producer's failover log as
//	                           the value: per branch, newest first, 8 uuid
//	                           and 8 seqno it began after
//	STREAM_END      0x55  p→c  4 reason (0 ok, 1 closed, 2 state changed, 5 aborted)
//	SNAPSHOT_MARKER 0x56  p→c  8 start, 8 end, 8 uuid, 4 flags (1 memory, 2 disk, 0x10 reset)
//	MUTATION        0x57  p→c  8 seqno, 8 expiry (absolute unix seconds, 0 never), 4 flags;
//	                           CAS in the header; key; value
//	DELETION        0x58  p→c  8 seqno; key
//	EXPIRATION      0x59  p→c  8 seqno; key
//	SET_STATE       0x5b  p→c  1 state (3 pending, 1 active); answered by a response
//	BUFFER_ACK      0x5d  c→p  4 bytes applied
//	SEQNO_ACK       0x5f  c→p  8 seqno of the last complete snapshot
//
// Control requests, sent by an operator or the manager to the node that is
// to receive a vbucket (internal/admin is a client):
//
//	TAKEOVER          0xe0  key: source host:port. Answered when the move
//	                        is over: OK (active here) or 0x84 with the reason.
//	REPLICATE         0xe1  key: source host:port. The vbucket becomes a
//	                        replica here, fed from the source (which may
//	                        itself be a replica: chained replication).
//	STOP_REPLICATION  0xe2  stop feeding the vbucket here.
//
// # Durability
//
// Replication is asynchronous: a write is acknowledged to the client when
// the active has stored it, before any replica has it. With 0 replicas an
// acknowledged write lives as long as its node; with 1 or 2 replicas it
// survives the loss of the active once a replica has it, which "stats
// streams" shows (seqno_behind 0) and which is usually within
// milliseconds; writes in that window are lost if the active dies. A node
// started with --sync-replication closes that window: it answers a write
// only once every stream copying its vbucket has acknowledged it
// (SEQNO_ACK; Node.WaitReplicated), at most --pending-timeout later, at
// the cost of a replica round trip per write (Couchbase's durability
// level "majority", as a node-wide minimum). When the node's cluster map
// gives the vbucket a replica, at least one stream must have the write,
// so a write to a new active whose replica stream is not open yet (after
// a move, while a replica is rebuilt) waits for it; a vbucket the map
// gives no replica is answered once its open streams have it. A wait that
// runs out answers the write with an error that says it may or may not
// have been stored (binary SyncWriteAmbiguous 0xa3, text SERVER_ERROR;
// internal/server) and counts it (sync_replication_timeouts). No write
// survives the loss of every node
// that holds it: this is a cache.
//
// Peer connections are opened by Node.Dial: the server logs in as its
// --cluster-auth administrator, inside TLS when it has peer TLS, and plain
// TCP without either.
//
// # Not implemented
//
// A consumer that ran past its branch point is rebuilt with a backfill,
// not rolled back to the point (DCP's rollback). Evictions and flush_all
// are not replicated (each node evicts under its own limit); the meta
// protocol's stale and win-token bits are not carried.
package stream
