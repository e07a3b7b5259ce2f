#!/usr/bin/env bash
# Exercise a cache node with libmemcached-tools over the BINARY protocol
# (--binary); exit non-zero on any wrong result.
#
# usage: memctools_binary_check.sh HOST:PORT
set -euo pipefail
srv="--servers=$1"
tool() { # the Debian names are memc*; some systems ship mem*
  local t=$1; shift
  if command -v "memc$t" >/dev/null; then "memc$t" --binary "$srv" "$@"; else "mem$t" --binary "$srv" "$@"; fi
}
fail() { echo "FAIL $*" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"

printf 'hello binary\n' > k1
head -c 50000 /dev/urandom > k2
tool cp k1 k2 || fail "memccp"
[ "$(tool cat k1)" = "hello binary" ] || fail "memccat k1"
# memccat writes a newline after each value
{ cat k2; printf '\n'; } > want2
tool cat k2 > got2 && cmp -s want2 got2 || fail "memccat k2 (50000 random bytes)"
tool cat k1 k2 > both && [ "$(wc -c < both)" -eq $((13 + 1 + 50000 + 1)) ] || fail "memccat of two keys"
if tool cat nosuchkey >/dev/null 2>&1; then fail "memccat of a missing key succeeded"; fi
tool rm k1 || fail "memcrm"
if tool cat k1 >/dev/null 2>&1; then fail "memccat after memcrm succeeded"; fi
tool stat | grep -q 'curr_items' || fail "memcstat has no curr_items"
tool flush || fail "memcflush"
if tool cat k2 >/dev/null 2>&1; then fail "memccat after memcflush succeeded"; fi
echo "libmemcached-tools --binary: all checks passed"
