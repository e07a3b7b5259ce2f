// Package manager is vbcache's cluster manager: the one place that knows
// the map, decides moves and failovers, and tells every node and client.
//
// # State and leadership
//
// The cluster's state (State: vbucket count, replicas, servers, the map,
// the forward map of a running rebalance, members, rev and revEpoch) is
// one JSON document in etcd. Several managers may run against one etcd;
// they campaign through etcd's election (concurrency.Election, a lease of
// SessionTTL seconds) and one leads. Only the leader writes the state, in
// a transaction that checks its election key and the document's revision,
// so a manager that lost its lease cannot overwrite its successor. Every
// manager watches the document and serves reads (the config, the
// streaming config, status) from its copy; changes sent to a follower are
// proxied to the leader.
//
// # The leader's duties
//
//   - At the start of a leadership: push the current config to every node
//     and resume a rebalance that was running.
//   - Probe every node each ProbeInterval (a VERSION request); a node that
//     holds vbuckets and stays down FailoverAfter is failed over (when the
//     cluster has replicas).
//   - Tell failed-over nodes they are out: each probe also tries the nodes
//     in State.FailedOver that are not members again (on a goroutine of
//     the probe loop's, so a paused one does not hold up the probes), and
//     the first time one answers, every vbucket turns dead there and it
//     gets the current map (tellFailedOver). A node that was paused or cut
//     off at its failover then answers NOT_MY_VBUCKET with the new map
//     instead of serving its old vbuckets for as long as it runs. Until
//     that next probe it still serves them: closing that window is the
//     node-side lease's job, which this package does not have yet.
//   - Membership: AddNode checks that the node answers in cluster mode with
//     the cluster's vbucket count; RemoveNode takes it out of the members.
//     Neither moves data: a rebalance does.
//
// # Rebalance
//
// StartRebalance asks the planner (internal/planner) for the target map of
// the current members and stores it as the forward map (it goes to clients
// as vBucketMapForward) with the rebalance's progress. The rebalance then
// moves vbuckets whose row differs, MaxMoves at once. A move (moveVBucket)
// is, for one vbucket:
//
//  1. the active: a TAKEOVER on the new owner (internal/stream; DESIGN.md
//     §3), or a plain activation for a vbucket nobody holds yet; then the
//     map with the new active is committed (rev+1) and pushed to every
//     node, and only then is the old copy deleted (DEL_VBUCKET);
//  2. the replicas: every replica of the forward row is told to follow its
//     source (the active, or the previous replica when replication is
//     chained), and the move waits until each new replica has caught up
//     with the active's sequence number as it was when the wait began;
//  3. the row is committed (rev+1, progress+1) and pushed; replicas the
//     row drops are stopped and deleted.
//
// Each step checks what the nodes already hold, so a move that a dead
// leader left half done is finished by its successor: the rebalance
// resumes from the state in etcd. StopRebalance stops after the moves in
// flight; the map is valid at every commit, since a row changes only when
// its new owner is active.
//
// # Failover
//
// Failover takes a node out at once: each vbucket it was active for gets
// its first live replica promoted (SET_VBUCKET active; the replica holds
// everything it had acknowledged, so the writes lost are those inside the
// replication lag); a vbucket without a replica becomes active and empty
// on the least loaded live member, so the cluster keeps serving. The map
// is published, surviving replicas re-pointed to the new actives, and a
// rebalance rebuilds the missing replicas on the remaining members.
//
// # What moves resolve by themselves and what they do not
//
// A takeover that fails leaves the vbucket active on its source (the
// source turns itself back active when the handover had not reached the
// target) or active on the target; the rebalance commits the latter and
// retries the former up to three times. internal/move documents the rules
// for the rarer outcomes (a node killed during the handover) that an
// operator resolves with `vbcache ctl`.
package manager
