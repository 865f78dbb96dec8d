#!/usr/bin/env bash
# The benchmarks' argument handling (make bench-smoke, so CI): --help prints the usage (exit 0), a bad argument is
# one message naming it and exit 2 before anything runs. Before: atoi read "--help" or "abc" as 0 and ran (minutes,
# or a division by zero), std::stoi's exception aborted with a core dump, and a deck that was not there printed a
# "cannot read" row with exit 0.
#   bench/check_arguments.sh BUILD_DIR
set -uo pipefail
bench=${1:?usage: bench/check_arguments.sh BUILD_DIR}/bench
failed=0

expect() {  # expect CODE TEXT COMMAND...: COMMAND exits CODE within 30 s and prints TEXT
  local code=$1 text=$2 out rc
  shift 2
  out=$(timeout 30 "$@" 2>&1)
  rc=$?
  if [[ $rc -ne $code || $out != *"$text"* ]]; then
    echo "FAIL: $* exited $rc (expected $code) saying:"
    echo "$out" | head -5
    echo "  expected it to say: $text"
    failed=1
  fi
}

expect 0 "usage: bench_sim" "$bench/bench_sim" --help
expect 2 "bench_sim: --scale STEPS: expected an integer 1 .. 100000, got 'abc'" "$bench/bench_sim" --scale 4 4 abc
expect 2 "--scale M: expected an integer 4 .. " "$bench/bench_sim" --scale 4 2
expect 2 "no-such.yaml: cannot read the deck (No such file or directory)" "$bench/bench_sim" --split no-such.yaml
expect 2 "no-such.yaml: cannot read the deck" "$bench/bench_sim" --migration-run no-such.yaml jitter
expect 0 "usage: bench_model" "$bench/bench_model" --help
expect 2 "bench_model: STEPS: expected an integer 1 .. 100000, got 'abc'" "$bench/bench_model" abc
expect 0 "usage: bench_trace" "$bench/bench_trace" --help
expect 2 "usage: bench_trace" "$bench/bench_trace" 0
if [[ -x $bench/bench_policy ]]; then
  expect 0 "usage: bench_policy" "$bench/bench_policy" --help
  expect 2 "bench_policy: STEPS: expected an integer 1 .. 100000, got '-3'" "$bench/bench_policy" "" -3
fi
if [[ -x $bench/bench_cuda ]] && ! "$bench/bench_cuda" --help 2>&1 | grep -q "built without CUDA"; then
  expect 0 "usage: bench_cuda" "$bench/bench_cuda" --help
  expect 2 "bench_cuda: --layers: expected an integer 1 .. 4096, got 'abc'" "$bench/bench_cuda" --layers abc
  expect 2 "bench_cuda: --steps: expected an integer 1 .. 100000, got '99999999999'" "$bench/bench_cuda" --steps 99999999999
  expect 2 "bench_cuda: unknown option '--bogus'" "$bench/bench_cuda" --bogus
fi
[[ $failed -eq 0 ]] && echo "bench arguments: all checks passed"
exit $failed
