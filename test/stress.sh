#!/usr/bin/env bash
# Runs the race-enabled tests over and over while a CPU hog keeps every
# core busy, to find the tests that pass only on an idle machine.
#
#   test/stress.sh                       5 runs of ./...
#   test/stress.sh 20                    20 runs
#   STRESS_N=10 test/stress.sh
#   test/stress.sh 10 ./test/cluster/ ./internal/server/
#   test/stress.sh ./test/proxy/         5 runs of one package
#
# Run i (1..N) is one `go test -race -count=1 -timeout $STRESS_TIMEOUT PKGS`
# (PKGS: the other arguments, or ./...), its output in run-i.log under a
# temporary directory that the script prints first and last. Meanwhile
# STRESS_HOGS busy loops (default: nproc) run at nice STRESS_NICE; a trap
# kills them when the script exits. At the default, 0, they compete with
# the tests as equals, as a CI machine's neighbours do, and slow them down
# for real; STRESS_NICE=19 takes only the CPU the tests leave idle (no core
# is ever free, but a test that wakes gets its core back at once).
#
# At the end a table gives, per package, the runs that reported it (ok or
# FAIL) and those that failed, with the names of the failed tests. A
# package that panicked or hit the timeout prints FAIL and counts as
# failed ([panic], [timeout], and TestX[timeout] for the tests that were
# running); so does a build failure. The script exits 1 if any package
# failed in any run (or go test failed without naming a package), else 0.
#
# Environment: STRESS_N (runs, default 5; a first argument that is a
# number wins), STRESS_TIMEOUT (go test's -timeout per package binary,
# default 6m, as in test/run.sh), STRESS_HOGS, STRESS_NICE; GOFLAGS etc. as
# for go test.
set -euo pipefail
cd "$(dirname "$0")/.."

# All of it is one function, read before it runs: bash reads a script as it
# goes, and a run takes long enough for a checkout to change this file.
main() {
  n=${STRESS_N:-5}
  case ${1:-} in
  '' | *[!0-9]*) ;; # no count: every argument is a package
  *)
    n=$1
    shift
    ;;
  esac
  case $n in '' | *[!0-9]* | 0)
    echo "stress.sh: the number of runs must be a positive integer, not '$n'" >&2
    exit 2
    ;;
  esac
  pkgs=("$@")
  [ ${#pkgs[@]} -gt 0 ] || pkgs=(./...)
  timeout=${STRESS_TIMEOUT:-6m}
  hogs=${STRESS_HOGS:-$(nproc)}
  nice=${STRESS_NICE:-0}

  dir=$(mktemp -d "${TMPDIR:-/tmp}/vbcache-stress.XXXXXX")
  echo "stress.sh: $n runs of go test -race -count=1 -timeout $timeout ${pkgs[*]}"
  echo "stress.sh: $hogs CPU hogs at nice $nice; logs in $dir"

  hog_pids=()
  stop_hogs() {
    local p
    for p in "${hog_pids[@]}"; do
      kill "$p" 2>/dev/null || true
    done
    for p in "${hog_pids[@]}"; do
      wait "$p" 2>/dev/null || true
    done
    hog_pids=()
  }
  trap stop_hogs EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  for _ in $(seq "$hogs"); do
    nice -n "$nice" bash -c 'while :; do :; done' &
    hog_pids+=($!)
  done

  # results.tsv: one line per run and package: run, package, ok|FAIL, the
  # failed top-level tests (comma-separated). go test prints a package's
  # output in one piece, its "--- FAIL: Test" lines before its FAIL line.
  results=$dir/results.tsv
  : >"$results"
  for i in $(seq "$n"); do
    log=$dir/run-$i.log
    start=$(date +%s)
    rc=0
    go test -race -count=1 -timeout "$timeout" "${pkgs[@]}" >"$log" 2>&1 || rc=$?
    awk -v run="$i" -v rc="$rc" '
      function note(name) { if (!(name in seen)) { seen[name] = 1; failed = failed (failed == "" ? "" : ",") name } }
      /^--- FAIL: / { note($3); next }
      /^panic: test timed out/ { note("[timeout]"); intimeout = 1; next }
      /^panic: / { note("[panic]"); next }
      intimeout && /^\t\tTest[^ ]* \(/ { note($1 "[timeout]"); next }
      intimeout && !/^\t/ { intimeout = 0 }
      ($1 == "ok" && $3 ~ /^([0-9.]+s|\(cached\))$/) || ($1 == "FAIL" && $3 ~ /^([0-9.]+s$|\[)/) {
        printf "%s\t%s\t%s\t%s\n", run, $2, $1, ($1 == "FAIL" ? failed : "")
        if ($1 == "FAIL") nfail++
        failed = ""; intimeout = 0; delete seen; next
      }
      END { if (rc != 0 && nfail == 0) printf "%s\t(go test exit %s)\tFAIL\t\n", run, rc }
    ' "$log" >>"$results"
    fails=$(awk -F'\t' -v run="$i" '$1 == run && $3 == "FAIL"' "$results" | wc -l)
    echo "stress.sh: run $i/$n: $fails failed, $(($(date +%s) - start))s ($log)"
  done
  stop_hogs

  echo
  awk -F'\t' '
    {
      runs[$2]++
      if ($3 == "FAIL") {
        fails[$2]++
        n = split($4, t, ",")
        for (j = 1; j <= n; j++) tests[$2, t[j]]++
      }
    }
    END {
      printf "%-50s %5s %8s  %s\n", "package", "runs", "failures", "failed tests (runs)"
      for (p in runs) order[++k] = p
      for (a = 1; a <= k; a++) for (b = a + 1; b <= k; b++) if (order[b] < order[a]) { x = order[a]; order[a] = order[b]; order[b] = x }
      for (a = 1; a <= k; a++) {
        p = order[a]; list = ""
        for (key in tests) { split(key, kp, SUBSEP); if (kp[1] == p) list = list (list == "" ? "" : " ") kp[2] "(" tests[key] ")" }
        printf "%-50s %5d %8d  %s\n", p, runs[p], fails[p] + 0, list
      }
    }
  ' "$results"
  echo
  echo "stress.sh: logs in $dir"
  if awk -F'\t' '$3 == "FAIL" { bad = 1 } END { exit !bad }' "$results"; then
    exit 1
  fi
}

main "$@"
