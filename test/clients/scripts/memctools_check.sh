#!/usr/bin/env bash
# Exercise a cache node with libmemcached's command-line tools (Debian names
# them memccp, memccat, …; upstream memcp, memcat, …). Exits non-zero on any
# wrong result.  usage: memctools_check.sh HOST:PORT
set -euo pipefail
addr=$1
srv="--servers=$addr"

tool() { # tool NAME: the installed binary for memNAME / memcNAME
  local n
  for n in "memc$1" "mem$1"; do
    if command -v "$n" >/dev/null 2>&1; then echo "$n"; return 0; fi
  done
  echo "missing tool mem$1 / memc$1" >&2
  exit 2
}
fail() { echo "FAIL $*" >&2; exit 1; }

cp_=$(tool cp); cat_=$(tool cat); rm_=$(tool rm); flush_=$(tool flush); stat_=$(tool stat)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# store files (the key is the file's base name)
printf 'hello world' > "$work/tools-a"
head -c 200000 /dev/urandom > "$work/tools-bin"
printf 'second' > "$work/tools-b"
"$cp_" "$srv" "$work/tools-a" "$work/tools-bin" "$work/tools-b" || fail "memcp exited $?"

# read them back, byte for byte (memcat writes a newline after each value)
[ "$("$cat_" "$srv" tools-a)" = "hello world" ] || fail "memcat tools-a"
"$cat_" "$srv" tools-bin > "$work/got-bin" || fail "memcat tools-bin exited $?"
{ cat "$work/tools-bin"; printf '\n'; } > "$work/want-bin"
cmp -s "$work/want-bin" "$work/got-bin" || fail "memcat tools-bin differs"
# several keys in one call (a multi-get)
"$cat_" "$srv" tools-a tools-b > "$work/got-two"
printf 'hello world\nsecond\n' | cmp -s - "$work/got-two" || fail "memcat two keys: got '$(cat "$work/got-two")'"

# replace (memcp --replace) and add (memcp --add) semantics
printf 'replaced' > "$work/tools-a"
"$cp_" "$srv" --replace "$work/tools-a" || fail "memcp --replace"
[ "$("$cat_" "$srv" tools-a)" = "replaced" ] || fail "after --replace"
printf 'added' > "$work/tools-new"
"$cp_" "$srv" --add "$work/tools-new" || fail "memcp --add"
[ "$("$cat_" "$srv" tools-new)" = "added" ] || fail "after --add"

# touch and exist, when installed
if t=$(tool touch 2>/dev/null); then
  "$t" "$srv" --expire=100 tools-a || fail "memtouch"
fi
if e=$(tool exist 2>/dev/null); then
  "$e" "$srv" tools-a || fail "memexist tools-a"
  if "$e" "$srv" tools-nope 2>/dev/null; then fail "memexist on a missing key succeeded"; fi
fi

# delete
"$rm_" "$srv" tools-b || fail "memrm"
if "$cat_" "$srv" tools-b >/dev/null 2>&1; then fail "memcat after memrm found the key"; fi

# stats
st=$("$stat_" "$srv") || fail "memstat exited $?"
grep -q 'curr_items' <<<"$st" || fail "memstat output lacks curr_items"
grep -q 'cmd_get' <<<"$st" || fail "memstat output lacks cmd_get"

# flush
"$flush_" "$srv" || fail "memflush"
if "$cat_" "$srv" tools-a >/dev/null 2>&1; then fail "memcat after memflush found the key"; fi
echo "libmemcached tools: ok"
