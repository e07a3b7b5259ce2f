#!/usr/bin/env bash
# Each vbcache_unsafe_<what> build tag turns one of issue 43's fixes off
# (a deliberately broken build, never shipped). This script shows that
# the tests catch each hole: with the tag, every test named for it must
# fail, and fail as a test (a build error or a test that passes is this
# script's failure). test/run.sh runs it after the fault schedule; run it
# alone with: bash test/unsafe.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# tag  package  tests (each must fail)  [arguments after -args]
checks=(
  "bestreplica   ./internal/manager TestFailoverPromotesTheBestReplica"
  "branch        ./internal/server  TestResumeAfterPromotionFollowsTheNewBranch"
  "markerlineage ./internal/stream  TestProducerNamesNoLineageAfterForget,TestConsumerRefusesNoLineage"
  "endtakeovers  ./internal/server  TestSetVBucketEndsATakeoverFromHere"
  "leaseterms    ./internal/server  TestLeaseJudgesPeersByTheirOwnLease,TestLeaseTakesViewWhenItsLeaseEnds"
  "leaserecord   ./internal/manager TestFailoverWaitsForAnEarlierLeadersLease"
  "terms         ./internal/server  TestStaleTermsAreRefused"
  "terms         ./internal/manager TestDeposedLeaderIsFenced"
  "incarnation   ./internal/server  TestRestartedPeerDoesNotVouch"
  "incarnation   ./internal/manager TestRestartedNodeHoldsNothing"
  "takeoverwatch ./internal/manager TestFailoverOfAMoveTargetStrandsNothing"
  "takeoverwatch ./internal/move    TestMoveTargetPausedInTakeover"
  "earlyinto     ./internal/manager TestFailoverOfAMoveTargetStrandsNothing"
  "intents       ./internal/manager TestSuccessorFinishesAHalfDoneFailover"
  "janitor       ./internal/manager TestJanitorRepairs"
  "janitorrepoint ./internal/manager TestJanitorRepointsAReplica"
  "restartactives ./internal/manager TestRestartedNodeGivenAReplica"
  "restartmidrb  ./internal/manager TestRestartedNodeMidRebalance"
  "catchup       ./internal/manager TestReplicaCatchesUpOnlyWithTheSourcesHistory"
  "reactivatehistory ./internal/manager TestReactivateNeedsTheSourcesHistory"
  "emptysource   ./internal/move    TestRecoverAfterSourceRestart"
  "sourcehistory ./internal/move    TestRecoverKeepsARestartedSourceDead"
  "syncreads     ./test/streams     TestSyncReplicationReadsWaitForReplicas,TestSyncReplicationReadsWaitForTheirKey -vbcache-tags=vbcache_unsafe_syncreads"
  "syncoutsiders ./test/streams     TestSyncReplicationSkipsAFailedOverReplica -vbcache-tags=vbcache_unsafe_syncoutsiders"
  "targetwait    ./test/cluster     TestPausedMoveTargetIsFailedOverInTime -vbcache-tags=vbcache_unsafe_targetwait"
)

log=$(mktemp)
trap 'rm -f "$log"' EXIT
bad=0
for c in "${checks[@]}"; do
  read -r what pkg tests extra <<<"$c"
  run="^($(tr ',' '|' <<<"$tests"))\$"
  start=$(date +%s)
  args=()
  [ -n "${extra:-}" ] && args=(-args "$extra")
  if go test -count=1 -timeout 4m -tags "vbcache_unsafe_$what" -run "$run" "$pkg" "${args[@]}" >"$log" 2>&1; then
    echo "vbcache_unsafe_$what: $tests ($pkg) passed: they do not catch what the tag turns off" >&2
    bad=1
    continue
  fi
  for t in ${tests//,/ }; do
    if ! grep -q -- "--- FAIL: $t " "$log"; then
      echo "vbcache_unsafe_$what: $t ($pkg) did not fail as a test:" >&2
      tail -30 "$log" >&2
      bad=1
    fi
  done
  echo "vbcache_unsafe_$what: $tests ($pkg) failed, as they must ($(( $(date +%s) - start )) s)"
done
exit "$bad"
