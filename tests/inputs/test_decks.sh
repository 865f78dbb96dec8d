#!/bin/bash
# Every deck in inputs/ passes `conductor validate`, and so does every noise preset in inputs/noise/ applied
# (as a deck fragment, the way jobs/ passes them) to the quickstart deck and to a per-stage-cost deck. The decks'
# defining numbers are pinned: the paper setups' pipeline and microbatch counts, quickstart's CPU and 4 ranks.
# Environment (from add_script_test): CONDUCTOR_BINARY, CONDUCTOR_SOURCE_DIR.
set -uo pipefail
src=${CONDUCTOR_SOURCE_DIR:?}
bin=${CONDUCTOR_BINARY:?}
cd "$src"
pass=0
failures=0
bad() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
resolved=$(mktemp)
trap 'rm -f "$resolved"' EXIT

# value SECTION KEY: from the last resolved deck.
value() { awk -v s="$1" -v k="$2" '/^[^ ]/ {sec = $0; sub(/:.*/, "", sec)} sec == s && $0 ~ "^  " k ":" {sub(/^[^:]*:[[:space:]]*/, ""); print; exit}' "$resolved"; }
top() { sed -n "s/^$1: //p" "$resolved"; }

decks=(inputs/*.yaml)
[[ -f ${decks[0]} ]] || bad "no decks in $src/inputs"
for deck in "${decks[@]}"; do
  if "$bin" validate "$deck" >"$resolved"; then
    pass=$((pass + 1))
  else
    bad "$deck does not validate (problems above)"
    continue
  fi
  name=$(basename "$deck" .yaml)
  expect_pm=""
  case $name in
    quickstart)
      [[ $(top backend) == cpu ]] || bad "quickstart: backend $(top backend), expected cpu"
      expect_pm="4 8" ;;
    gpt3-1.5b) expect_pm="8 24" ;;
    gpt3-6.2b) expect_pm="8 24" ;;
    gpt3-14.6b) expect_pm="16 48" ;;
  esac
  if [[ -n $expect_pm ]]; then
    got="$(value parallel pipeline) $(value parallel microbatches)"
    [[ $got == "$expect_pm" ]] && pass=$((pass + 1)) ||
      bad "$deck: pipeline and microbatches are '$got', expected '$expect_pm'"
  fi
done

presets=(inputs/noise/*.yaml)
[[ -f ${presets[0]} ]] || bad "no noise presets in $src/inputs/noise"
for preset in "${presets[@]}"; do
  for deck in inputs/quickstart.yaml inputs/gpt3-1.5b.yaml; do
    if "$bin" validate "$deck" "$preset" >"$resolved"; then
      pass=$((pass + 1))
    else
      bad "$preset applied to $deck does not validate"
      continue
    fi
    # The preset's values arrive in the resolved deck (none is silently dropped).
    [[ $(value noise seed) == "$(sed -n 's/^  seed: //p' "$preset")" ]] && pass=$((pass + 1)) ||
      bad "$preset on $deck: noise.seed is '$(value noise seed)' in the resolved deck"
  done
done

echo "decks: $pass passed, $failures failed"
[[ $failures -eq 0 ]]
