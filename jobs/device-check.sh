#!/usr/bin/env bash
# One-shot check of the CUDA backend on a GPU machine (issue 8), in under 8 minutes:
#   1. configure and build with CUDA (the CUDA tests and bench_cuda only; the architecture of GPU 0)
#   2. the CUDA tests (ctest -L cuda): every kernel vs the CPU backend, full training steps vs the CPU, a
#      two-rank pipeline on one GPU over the host-staged MPI transport, NCCL between two GPUs (skipped, with
#      the reason, on a one-GPU machine)
#   3. bench_cuda: tokens/s and MFU of a GPT-2-1.5B-shaped stage (d 1600, 25 heads, 4 layers, T 1024), bf16
#   4. bench_cuda --quickstart: CUDA vs CPU losses of inputs/quickstart.yaml
#   and a summary block at the end. Exit status: 0 when every phase passed, 1 otherwise.
#
# Usage: jobs/device-check.sh            (from anywhere; builds in $BUILD, default <repo>/build-device)
# Env:   BUILD, JOBS (default nproc), CUDA_ARCH (default: GPU 0's compute capability, else "90;80"),
#        OUT (if set, the full log is also written to $OUT/device-check.log)
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-device}
JOBS=${JOBS:-$(nproc)}
START=$(date +%s)
LOG=/dev/null
if [[ -n ${OUT:-} ]]; then
  mkdir -p "$OUT"
  LOG=$OUT/device-check.log
fi
exec > >(tee -a "$LOG") 2>&1

SUMMARY=()
FAILED=0
say() { echo "device-check: $*"; }

# phase NAME TIMEOUT_S COMMAND...: runs the command under a time limit and records PASS / FAIL / TIMEOUT.
phase() {
  local name=$1 limit=$2
  shift 2
  say "=== $name (limit ${limit}s): $*"
  local t0 rc
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@"
  rc=$?
  local dt=$(($(date +%s) - t0)) status=PASS
  if ((rc == 124 || rc == 137)); then
    status="TIMEOUT"
  elif ((rc != 0)); then
    status="FAIL (exit $rc)"
  fi
  [[ $status == PASS ]] || FAILED=1
  SUMMARY+=("$(printf '%-12s %-16s %4ds' "$name" "$status" "$dt")")
  return $rc
}

say "repo $ROOT, build $BUILD, $JOBS jobs, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L; then
  say "no NVIDIA GPU visible (nvidia-smi failed): this script is for a GPU machine"
  exit 1
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv

ARCH=${CUDA_ARCH:-}
if [[ -z $ARCH ]]; then
  ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
  [[ $ARCH =~ ^[0-9]+$ ]] || ARCH="90;80"
fi
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
[[ -f $BUILD/CMakeCache.txt ]] && GEN=()  # keep the generator of an existing build folder

TARGETS=(cuda_kernel_tests cuda_stage_tests cuda_pipeline_test cuda_device_test cuda_runtime_test bench_cuda)
if phase configure 150 cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCONDUCTOR_CUDA=ON \
  "-DCMAKE_CUDA_ARCHITECTURES=$ARCH" &&
  phase build 300 cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}"; then
  phase cuda-tests 150 ctest --test-dir "$BUILD" -L cuda --output-on-failure --timeout 120
  BENCH_OUT=$(mktemp)
  phase bench-bf16 120 bash -c "'$BUILD/bench/bench_cuda' --precision bf16 --layers 4 --batch 8 --microbatches 4 \
    --steps 4 | tee '$BENCH_OUT'"
  phase bench-tf32 90 bash -c "'$BUILD/bench/bench_cuda' --precision fp32 --tf32 --layers 4 --batch 8 \
    --microbatches 2 --steps 2 | tee -a '$BENCH_OUT'"
  phase quickstart 120 bash -c "'$BUILD/bench/bench_cuda' --quickstart '$ROOT/inputs/quickstart.yaml' --steps 10 \
    | tee -a '$BENCH_OUT'"
fi

echo
echo "==================== device-check summary ===================="
echo "GPU:   $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), CUDA arch $ARCH"
echo "git:   $(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
for line in "${SUMMARY[@]}"; do echo "phase: $line"; done
if [[ -n ${BENCH_OUT:-} && -f $BENCH_OUT ]]; then
  grep -E "^bench_cuda|^  (step [0-9]+\.[0-9]+ ms|MFU)" "$BENCH_OUT" | sed 's/^/bench: /'
fi
if [[ -f $BUILD/Testing/Temporary/LastTest.log ]]; then
  grep -hE "^(SKIPPED|step [0-9]+: pipeline|PASSED|FAILED)" "$BUILD/Testing/Temporary/LastTest.log" | sed 's/^/tests: /'
fi
echo "total: $(($(date +%s) - START)) s; result: $([[ $FAILED == 0 ]] && echo PASS || echo FAIL)"
echo "=============================================================="
exit $FAILED
