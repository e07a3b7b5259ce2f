#!/usr/bin/env bash
# The project's test command (README, .ci/run): installs what the black-box
# suites need when run as root on Debian, then vet, gofmt, the race-enabled
# tests, and a short fuzz run of every fuzz target (internal/, cmd/).
#
#   test/run.sh            everything
#   FUZZTIME=5s test/run.sh
#   SKIP_INSTALL=1 test/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime=${FUZZTIME:-20s}
# memcached -S checks passwords through Cyrus SASL: sasl2-bin (saslpasswd2
# fills the test's sasldb) and libsasl2-modules (PLAIN, also for
# libmemcached's SASL client); php-*, nodejs/npm (memjs) and openssl are the
# binary-protocol and TLS clients of test/clients and test/security;
# python3-memcache (python-memcached) and libspymemcached-java are client
# libraries test/interop checks key placement against; iproute2 (ip netns)
# and nftables (nft) make test/faults' hosts and partitions; prometheus is
# the real Prometheus (and promtool) that test/lifecycle scrapes and checks
# the processes' metrics with; chromium is the real browser that drives the
# manager's web console there (through chromedp).
debs=(nftables iproute2 memcached python3-pymemcache python3-pylibmc libcache-memcached-perl libmemcached-tools
  sasl2-bin libsasl2-modules php-cli php-memcached openssl python3-memcache libspymemcached-java prometheus chromium)
# spymemcached's test compiles a Java file: the image ships a JDK (17); a
# machine without javac gets Debian's.
command -v javac >/dev/null 2>&1 || debs+=(default-jdk-headless)
# Node.js and npm: the machine image ships them (nodesource's nodejs
# package, which includes npm and conflicts with Debian's npm package), so
# they are installed from Debian only where there is no npm at all.
command -v npm >/dev/null 2>&1 || debs+=(nodejs npm)

install_deps() {
  if [ "${SKIP_INSTALL:-}" = 1 ]; then return 0; fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "run.sh: no apt-get; install ${debs[*]} yourself" >&2
    return 0
  fi
  local missing=()
  for p in "${debs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ "${#missing[@]}" -eq 0 ]; then return 0; fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "run.sh: missing ${missing[*]} and not root; the suites will skip (or fail with CI=true)" >&2
    return 0
  fi
  echo "== apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y "${missing[@]}"
}

install_deps

# memjs for test/clients (pinned by test/clients/memjs/package-lock.json;
# node_modules is not committed). Needs no root; if it fails the memjs test
# tries again itself and skips (fails with CI=true).
if [ ! -d test/clients/memjs/node_modules/memjs ] && command -v npm >/dev/null 2>&1; then
  echo "== npm ci (test/clients/memjs)"
  (cd test/clients/memjs && npm ci --no-audit --no-fund) || echo "run.sh: npm ci failed" >&2
fi

echo "== go vet"
go vet ./...

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:" >&2
  echo "$unformatted" >&2
  exit 1
fi

# Test output and what tests leave for a reader (porcupine's HTML of a
# failing history, test/faults) go to test-artifacts/ (not committed).
export VBCACHE_ARTIFACTS="${VBCACHE_ARTIFACTS:-$PWD/test-artifacts}"
mkdir -p "$VBCACHE_ARTIFACTS"

echo "== go test -race (log: $VBCACHE_ARTIFACTS/go-test.log)"
# -timeout bounds each package's test binary: a hang ends in a goroutine
# dump, not at CI's limit. test/faults runs the fault schedule (each fault
# 8 times with and without --sync-replication, on a cluster shape drawn
# from each seed, about 25 minutes under -race); every
# other package took at most 67-125 s under -race on a 2-core machine
# shared with other test runs (load average up to 15); keep each bound
# well above its package.
go test -race -timeout 6m $(go list ./... | grep -v '/test/faults$') 2>&1 | tee "$VBCACHE_ARTIFACTS/go-test.log" &
others=$!
go test -race -timeout 35m -v ./test/faults/ > "$VBCACHE_ARTIFACTS/faults-test.log" 2>&1 &
faults=$!
wait "$others" || { wait "$faults"; tail -50 "$VBCACHE_ARTIFACTS/faults-test.log"; exit 1; }

# The rest runs beside the fault schedule, which takes longest, in a
# subshell of its own (set -e holds there); the schedule ends either way.
(

echo "== fuzz (${fuzztime} each)"
# Every Fuzz* target of every package, found by grep so new ones join in.
found=0
for file in $(grep -rl --include='*_test.go' '^func Fuzz' internal cmd memcache 2>/dev/null | sort); do
  pkg="./$(dirname "$file")/"
  for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$file" | sed 's/^func //'); do
    echo "-- $pkg $f"
    # Go's fuzzer can report "context deadline exceeded" with no failing
    # input when -fuzztime runs out while a worker is busy (a known race in
    # the coordinator, likelier on a loaded machine). Such a run is retried,
    # up to twice; a real finding prints "Failing input" and fails at once.
    for attempt in 1 2 3; do
      if go test -run '^$' -fuzz "^${f}\$" -fuzztime "$fuzztime" "$pkg" 2>&1 | tee /tmp/vbcache-fuzz.$$; then
        break
      fi
      if [ "$attempt" = 3 ] || ! grep -q 'context deadline exceeded' /tmp/vbcache-fuzz.$$ || grep -q 'Failing input' /tmp/vbcache-fuzz.$$; then
        rm -f /tmp/vbcache-fuzz.$$
        exit 1
      fi
      echo "-- $pkg $f: the fuzzer's deadline race, not a finding; running it again"
    done
    rm -f /tmp/vbcache-fuzz.$$
    found=1
  done
done
[ "$found" = 1 ] || { echo "no fuzz targets found" >&2; exit 1; }
) &
rest=$!
rest_status=0
wait "$rest" || rest_status=$?

echo "== the fault schedule (log: $VBCACHE_ARTIFACTS/faults-test.log)"
status=0
wait "$faults" || status=$?
# The schedule's summary (and all of it, when it failed).
grep -E '^(=== RUN|--- |PASS|FAIL|ok )|schedule seed|acknowledged writes lost in all|^ +schedule_test.go:[0-9]+:   ' "$VBCACHE_ARTIFACTS/faults-test.log" || true
if [ "$status" -ne 0 ]; then
  cat "$VBCACHE_ARTIFACTS/faults-test.log"
  exit 1
fi
[ "$rest_status" = 0 ] || { echo "the proxy's tests without event loops or a fuzz target failed (above)" >&2; exit 1; }
# After the schedule, whose timing a busy machine would disturb: each
# vbcache_unsafe_* build must fail the tests named for it (about 3
# minutes).
echo "== the vbcache_unsafe_* builds are caught"
bash test/unsafe.sh
echo "== all tests passed"
