#!/usr/bin/env bash
# make bench: every benchmark, each printing ratios measured side by side in its own run.
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
status=0
for b in bench_sim bench_model bench_trace bench_policy bench_cuda; do
  if [[ -x $build/bench/$b ]]; then
    echo "===== $b"
    "$build/bench/$b" || status=1
  fi
done
echo "===== bench_runtime"
/usr/bin/python3 bench/bench_runtime.py "$build" || status=1
exit $status
