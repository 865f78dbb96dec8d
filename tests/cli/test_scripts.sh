#!/usr/bin/env bash
# The maintenance scripts (scripts/): each answers --help with its usage and exit 0 and refuses an argument it
# does not take with exit 2, before doing anything (a mistyped flag once rewrote the tree or docs/deck.md);
# gen-deck-doc.sh with a binary that fails leaves docs/deck.md as it was, and with the real one writes exactly
# the committed file. Usage: test_scripts.sh CONDUCTOR_BINARY
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(realpath "${1:?usage: test_scripts.sh CONDUCTOR_BINARY}")
fail=0
no() { echo "FAIL: $*" >&2; fail=1; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

for s in deps.sh format.sh gen-deck-doc.sh gpu-kit.sh test-gpu-kit.sh test-no-policy.sh; do
  out=$(bash "$root/scripts/$s" --help 2>&1)
  rc=$?
  [[ $rc -eq 0 && $out == *Usage* || $rc -eq 0 && $out == *usage* ]] || no "$s --help: exit $rc, '$out'"
  out=$(bash "$root/scripts/$s" --no-such-flag 2>&1)
  rc=$?
  [[ $rc -eq 2 && $out == *"unexpected argument '--no-such-flag'"* ]] || no "$s --no-such-flag: exit $rc, '$out'"
done
out=$(/usr/bin/python3 "$root/scripts/stamp-policy.py" --help 2>&1) || no "stamp-policy.py --help: exit $?"
[[ $out == usage:* ]] || no "stamp-policy.py --help: '$out'"
out=$(/usr/bin/python3 "$root/scripts/stamp-policy.py" "$scratch/missing.pt" 2>&1)
rc=$?
[[ $rc -eq 2 && $out == "stamp-policy: error: cannot read '$scratch/missing.pt': No such file or directory" ]] ||
  no "stamp-policy.py on a missing file: exit $rc, '$out'"

# docs/deck.md: untouched by a failing binary; regenerated identically by the real one (into a copy of the
# scripts and docs, so the checkout is never written).
mkdir -p "$scratch/repo/scripts" "$scratch/repo/docs"
cp "$root/scripts/gen-deck-doc.sh" "$root/scripts/usage.sh" "$scratch/repo/scripts/"
cp "$root/docs/deck.md" "$scratch/repo/docs/deck.md"
printf '#!/bin/sh\nexit 3\n' >"$scratch/failing"
chmod +x "$scratch/failing"
out=$(bash "$scratch/repo/scripts/gen-deck-doc.sh" "$scratch/failing" 2>&1)
rc=$?
[[ $rc -eq 2 && $out == *"docs/deck.md left as it was"* ]] || no "gen-deck-doc.sh with a failing binary: exit $rc, '$out'"
cmp -s "$root/docs/deck.md" "$scratch/repo/docs/deck.md" || no "gen-deck-doc.sh with a failing binary changed docs/deck.md"
echo "# stale" >"$scratch/repo/docs/deck.md"
(cd / && bash "$scratch/repo/scripts/gen-deck-doc.sh" "$bin" >/dev/null) || no "gen-deck-doc.sh $bin failed"
cmp -s "$root/docs/deck.md" "$scratch/repo/docs/deck.md" ||
  no "gen-deck-doc.sh does not reproduce the committed docs/deck.md (rerun it after changing a key)"
[[ ! -e "$scratch/repo/docs/deck.md.tmp" ]] || no "gen-deck-doc.sh left docs/deck.md.tmp"

[[ $fail -eq 0 ]] && echo "scripts: all checks passed"
exit $fail
