#!/usr/bin/env bash
# make install (issue 18): installs this build into a temporary prefix and uses it from an empty folder: the
# files are in place, the quickstart deck simulates from there (with the global tier, the shipped policy is
# found under the prefix, and the global tier's module under PREFIX/lib/conductor), an analysis tool runs through the conductor-analysis launcher, the launcher fails
# clearly without a usable Python, and a job script finds the installed binary.
# Usage: test_install.sh BUILD_DIR   (environment from add_script_test: CONDUCTOR_HAVE_POLICY)
set -euo pipefail
build=${1:?usage: test_install.sh BUILD_DIR}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() {
  echo "test_install: FAIL: $*" >&2
  exit 1
}

cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }
share=$prefix/share/conductor
for f in bin/conductor bin/conductor-analysis bin/conductor-launch share/conductor/analysis/bubbles.py \
  share/conductor/analysis/conductor_trace.py share/conductor/jobs/train.sbatch share/conductor/jobs/common.sh \
  share/conductor/scripts/conductor-launch share/conductor/inputs/quickstart.yaml \
  share/conductor/inputs/noise/straggler.yaml share/doc/conductor/README.md share/doc/conductor/deck.md; do
  [[ -e $prefix/$f ]] || fail "$f was not installed"
done
for f in bin/conductor bin/conductor-analysis bin/conductor-launch share/conductor/jobs/train.sbatch; do
  [[ -x $prefix/$f ]] || fail "$f is not executable"
done
[[ ! -e $share/analysis/tests ]] || fail "the analysis tests were installed"

# From an empty folder: nothing of the source tree in reach.
work=$tmp/work
mkdir "$work"
cd "$work"
"$prefix/bin/conductor" simulate "$share/inputs/quickstart.yaml" "$share/inputs/noise/jitter10.yaml" run.steps=3 \
  >"$tmp/sim.log" || { cat "$tmp/sim.log"; fail "simulate of the installed quickstart deck"; }
[[ -s runs/quickstart-sim/summary.json && -s runs/quickstart-sim/trace.h5 ]] || fail "simulate wrote no results"
"$prefix/bin/conductor-analysis" bubbles runs/quickstart-sim/trace.h5 >"$tmp/bubbles.txt" ||
  { cat "$tmp/bubbles.txt"; fail "conductor-analysis bubbles"; }
grep -q "overall bubble ratio" "$tmp/bubbles.txt" || { cat "$tmp/bubbles.txt"; fail "bubbles printed no ratio"; }
"$prefix/bin/conductor-analysis" timeline runs/quickstart-sim/trace.h5 -o timeline.png --step 1 >/dev/null ||
  fail "conductor-analysis timeline"
[[ -s timeline.png ]] || fail "timeline wrote no PNG"
if [[ ${CONDUCTOR_HAVE_POLICY:-1} == 1 ]]; then
  CONDUCTOR_LOG=debug "$prefix/bin/conductor" simulate "$share/inputs/quickstart.yaml" run.steps=2 scheduler.kind=ppo run.output=ppo \
    >"$tmp/ppo.log" 2>&1 || { cat "$tmp/ppo.log"; fail "the installed binary did not find the shipped policy"; }
  # The global tier is a module the binary loads when used: the installed one, not the build's.
  # One CONDUCTOR_GLOBAL_TIER names and that is not there is bad input: exit 2.
  grep -q "global tier: $prefix/lib/conductor/libconductor_global_tier.so" "$tmp/ppo.log" ||
    { cat "$tmp/ppo.log"; fail "the installed binary did not load the installed global tier module"; }
  set +e
  CONDUCTOR_GLOBAL_TIER=$tmp/none.so "$prefix/bin/conductor" simulate "$share/inputs/quickstart.yaml" run.steps=2 \
    scheduler.kind=ppo run.output=ppo-missing >"$tmp/ppo-missing.log" 2>&1
  rc=$?
  set -e
  [[ $rc == 2 ]] && grep -q "scheduler.kind: ppo needs the global tier's module libconductor_global_tier.so" \
    "$tmp/ppo-missing.log" && grep -q "^  $tmp/none.so: not there" "$tmp/ppo-missing.log" ||
    { cat "$tmp/ppo-missing.log"; fail "a missing global tier module: exit $rc, or no clear message"; }
fi

# The launcher: no usable interpreter, an unknown tool.
printf '#!/bin/sh\nexit 1\n' >"$tmp/nopython"
chmod +x "$tmp/nopython"
set +e
CONDUCTOR_PYTHON=$tmp/nopython "$prefix/bin/conductor-analysis" bubbles runs/quickstart-sim/trace.h5 2>"$tmp/err"
rc=$?
set -e
[[ $rc == 2 ]] || fail "a launcher without a usable Python exited $rc, not 2"
grep -q "no Python interpreter that imports h5py and numpy: tried $tmp/nopython (CONDUCTOR_PYTHON)" "$tmp/err" ||
  { cat "$tmp/err"; fail "unclear message without a usable Python"; }
set +e
"$prefix/bin/conductor-analysis" nosuchtool 2>"$tmp/err"
rc=$?
set -e
[[ $rc == 2 ]] && grep -q "unknown tool 'nosuchtool'; available: .*bubbles .*timeline" "$tmp/err" ||
  { cat "$tmp/err"; fail "unknown tool: exit $rc"; }

# A job script of the installed tree launches the installed binary (not the build's, which ctest names).
env -u CONDUCTOR_BINARY -u CONDUCTOR_ROOT DRY_RUN=1 DECK=$share/inputs/quickstart.yaml OUTPUT=$work/job bash "$share/jobs/train-cpu.sbatch" >"$tmp/job.log" 2>&1 ||
  { cat "$tmp/job.log"; fail "train-cpu.sbatch from the installed tree"; }
grep -q "running: $share/scripts/conductor-launch .* -np 4 $prefix/bin/conductor run" "$tmp/job.log" ||
  { cat "$tmp/job.log"; fail "the job script did not launch the installed binary"; }
echo "test_install: ok ($prefix)"
