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
//   - Probe every member each ProbeInterval with a lease grant (LEASE;
//     each member from a goroutine of its own, on a connection kept for
//     grants, so a silent node delays no other's lease); a node that holds
//     vbuckets and stays down FailoverAfter is failed over (when the
//     cluster has replicas), on a goroutine of the probe loop's, since a
//     failover may wait for the node's lease.
//   - Notice restarts: each grant's answer names the node's incarnation
//     and how many vbuckets it holds. A node that restarted faster than
//     FailoverAfter comes back empty while the map still names it active;
//     when two answers in a row say so (and no rebalance or failover
//     runs), it is failed over at once, through the same path as a node
//     that is down (restart.go).
//   - Tell failed-over nodes they are out: each probe also tries the nodes
//     in State.FailedOver that are not members again (on a goroutine of
//     the probe loop's, so a paused one does not hold up the probes), and
//     the first time one answers, every vbucket turns dead there and it
//     gets the current map (tellFailedOver). A node that was paused or cut
//     off at its failover then answers NOT_MY_VBUCKET with the new map
//     instead of serving its old vbuckets for as long as it runs (its
//     lease had run out before the failover promoted anything, so it
//     answered TMPFAIL meanwhile, and it takes the new map from its
//     peers as soon as it runs again: internal/server, lease.go).
//   - Membership: AddNode checks that the node answers in cluster mode with
//     the cluster's vbucket count (a node failed over before has every
//     vbucket turned dead there first, and its grants, stopped by its
//     failover, resume); RemoveNode takes it out of the members.
//     Neither moves data: a rebalance does.
//   - Finish the failovers a previous leader committed and did not
//     finish (their intents in the state: intent.go).
//   - The janitor (janitor.go): at the start and every JanitorInterval,
//     when every member answers and nothing runs, compare the map with
//     the copies the nodes report and repair a stray active, a vbucket no
//     member has active, a replica that does not follow its row's source
//     and an orphan copy, each logged and counted.
//
// # Rebalance
//
// StartRebalance asks the planner (internal/planner) for the target map of
// the current members and stores it as the forward map (it goes to clients
// as vBucketMapForward) with the rebalance's progress. The rebalance first
// places, in one batch and one commit, every vbucket nobody holds
// (populate), then moves vbuckets whose row differs, MaxMoves at once,
// the next one chosen by pickNext (decide.go): moves a previous leader
// committed and did not finish first, then the lowest vbucket not being
// moved and not given up on (a vbucket is tried maxFailures times).
//
// A vbucket's move (moveVBucket) is decided step by step by planVB
// (decide.go), a pure function of the vbucket's rows in etcd (the map's,
// the forward map's, Rebalance.Moving's entry) and of one look at the
// two actives (move.Observe: state, reachability, an open stream), and
// the I/O around it does what it says:
//
//  1. the active: while the row's active differs from the forward row's,
//     one step, then a new look: a move not begun goes through move.Move
//     (TAKEOVER on the new owner, internal/stream; DESIGN.md §3), a move
//     into the row's replica first building the forward row's new
//     replica from the active (caught up, it is committed with the new
//     active, so the vbucket never has no replica; without it a write
//     the new owner acknowledged before its new replica caught up died
//     with it, under --sync-replication too), a swap ([a, b] to [b, a])
//     keeping a's dead copy, committed as the replica, to resume
//     streaming from b instead of being copied again, a move
//     found in flight or done but not committed through move.Recover
//     (internal/move's rules R1-R5), a vbucket nobody holds is activated.
//     Both publish through the manager (commitActive, as
//     move.Options.Publish): the map with the new active is committed
//     (rev+1, the old active noted in Rebalance.Moving) and pushed to
//     every node, and only then is the old copy deleted (DEL_VBUCKET).
//     Two actives, or an end of the move that does not answer, is stuck:
//     nothing is touched and the move fails (a lost source is a
//     failover's to settle: planVB sends it to R5 only when the target is
//     pending, proof that a handover began);
//  2. the rest, once the active is committed: the old copy is deleted if
//     it was not, every replica of the forward row is told to follow its
//     source (the active, or the previous replica when replication is
//     chained), the move waits until each new replica has caught up with
//     the active's sequence number as it was when the wait began;
//  3. the row is committed (rev+1, progress+1, the Moving entry cleared)
//     and pushed; replicas the row drops are stopped and deleted.
//
// So a move that a dead leader left half done is finished by its
// successor from what etcd and the nodes say: the rebalance resumes from
// the state in etcd, and a move halts (move.Options.Halt) as soon as its
// leader's leadership ends, so a deposed leader stops acting on the nodes
// (it may still make the one change it had decided on).
// StopRebalance stops after the moves in flight; the map is valid at
// every commit, since a row changes only when its new owner is active.
//
// # Failover
//
// Failover takes a node out: each vbucket it was active for gets the live
// replica that holds the most of its history promoted (bestReplica: every
// replica is asked for its position; the writes lost are those that no
// surviving replica had); a vbucket without a replica becomes active and
// empty on the least loaded live member, so the cluster keeps serving. A
// vbucket that a rebalance was moving into the node, not yet committed,
// is made active again on its source once the node is fenced (the move's
// TAKEOVER is abandoned at once, move.Options.Abandon: the node may have
// turned active with its answer lost, and the source's copy is dead; the
// SET_VBUCKET that makes the source active again also ends the handover
// running from it, which the silent node held up).
//
// A failover waits for a running rebalance to stop, so nothing the
// rebalance does may wait for the node being failed over (a paused
// node's kernel accepts connections and never answers): config pushes
// do not wait for it (pushConfigAcks), a move into it ends, its recovery
// stops looking at it (move.Options.TargetLost), and a move's steps on a
// replica there end (connUnlessFailing). The vbucket is then unserved for
// about the lease plus --failover-after, as for any paused node.
//
// Nothing is promoted before the node has surely stopped serving
// (fencing.go has the rule and its argument, as pure functions with
// datadriven tests in testdata/fencing): the grants to it stop; a node
// that answers is told (every vbucket it holds turns dead); one that does
// not is waited for until its lease from the managers must have run out.
// A failover that no push could make sure of (no majority of a quorum set
// the node may hold answers) returns ErrNotSure and changes nothing. The
// new map is committed and pushed before any promotion, so a node that
// asks its peers for a lease learns it first; the promotions come at
// once when the peers vouched for the manager without a break, or a
// lease later. When the push reached too few of the node's quorum set
// for either (after a leader change that set is every member), the map
// stays committed and nothing is promoted then (ErrNotSure); the
// promotions are done once the node answers again and has been told it
// is out (tellFailedOver, finishPromotion), if the map is still the
// failover's. Force (ctl failover --force) skips the waits.
//
// A promotion is a move whose source is fenced, and goes through
// move.Promote (activate, failover.go): internal/move's rules decide with
// the failed node counted as lost and never asked. R5: the new active is
// a replica, so it is promoted (SET_VBUCKET active, which stops its
// replication); R1: it is active already, nothing to do; R2: it is
// pending (a handover into it in flight), so the promotion waits, up to
// promoteSettle; a replica that holds no copy (dead there: its node
// restarted, or the copy was dropped) is activated empty there, as a
// cache loses data, never availability (counted as lost), unless it is
// the dead copy a swap kept on its old active, the row's only replica
// and not yet streaming: that copy is activated as it is (failover.go
// says why it holds every acknowledged write); anything else
// (it does not answer within promoteSettle, refuses connections) is
// unresolved: nothing is touched, the log names the rule, and
// FailoverReport.Unactivated counts it. There is no publish step (the map
// was committed and pushed before) and no old copy to delete. A vbucket without a replica is not a move: its new active is
// simply activated, empty. The new actives are worked on at once, one
// goroutine each, and the failover waits for all of them. Then the
// surviving replicas are re-pointed to the new actives, and a rebalance
// rebuilds the missing replicas on the remaining members.
//
// # What moves resolve by themselves and what they do not
//
// internal/move's rules settle a takeover that failed or was left by a
// dead leader: the vbucket ends active on its source (R3, R4: the move
// is retried, up to maxFailures times) or on the target (R1, R5: the
// manager commits it). They settle a failover's promotion too (R5, R1;
// above). What stays stuck until an operator, a failover or the janitor
// acts: two actives (never produced by the streams; the janitor makes
// dead the one the map does not name, once every member answers), a source
// that does not answer (failover's), a target that does not answer (the
// move is given up; the vbucket stays on its source; in a failover, the
// vbucket is left without an active, counted in Unactivated). A new
// leader knows no process ids from its predecessor's preflight, so a
// source that restarted (same address, its copies gone) reads as a dead
// source, which R4 sets active again, empty: never two actives, but the
// vbucket's items are lost (move.Recover's comment).
//
// Failover's promotions go through internal/move too (move.Promote): a
// failover promotes a replica of a node it cannot (or need not) ask, and
// the rules take that node as fenced, the proof being the failover's
// (fencing.go), not theirs. A vbucket a failover gives, empty, to a node
// without a copy is an activation, not a move.
//
// # Locks
//
// Seven locks, each documented at its field (manager.go): opMu,
// commitMu, mu, pubMu, nodeConn.mu (the grants' and the console samples'
// one connection per node), connPool.mu (conn's idle connections) and
// batchMu (commitMove's queue). The order, outermost first:
//
//	opMu → commitMu → mu (batchMu, a leaf, only queues commits)
//	opMu → pubMu (let go of while a push runs) → connPool.mu
//	opMu → nodeConn.mu → mu (only a grant's: it records the answer)
//
// mu, pubMu, connPool.mu and batchMu are leaves: nothing takes another lock while
// holding one of them (conn takes connPool.mu only to take or give back
// an idle connection, never across a dial or a request; connIn takes mu
// to find the nodeConn and lets go of it before taking the nodeConn's
// mu; no request run under a nodeConn's mu takes another's, and only a
// grant, on a grant connection, takes mu under one, so that stopGrants,
// which waits for that nodeConn, sees every answer). opMu is held across
// network calls on purpose (etcd in every commit; nodes in AddNode's
// check and push and in failover's promotions and push; the promotions'
// goroutines take only connPool.mu, through conn, and move.Promote takes
// no manager lock);
// nothing those calls wait for takes it:
// a move takes opMu only around its commits (commitActive, the row's
// commit; commitMove takes it around a batch of moves' commits, and the
// moves waiting for that batch hold no lock) and pushes after letting
// go, never holds it around move.Move or
// move.Recover, failover lets go of it before it waits for the
// rebalance goroutine, and the tell of a failed-over node that AddNode
// waits for (tellFailedOver) takes only mu and connPool.mu.
// commitMu is held across update's etcd
// transaction, mu never across an etcd call or a node request. The
// rebalance goroutine's own errMu (runRebalance) is a leaf too.
package manager
