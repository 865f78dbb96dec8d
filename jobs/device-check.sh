#!/usr/bin/env bash
# One-shot check of the CUDA backend on a GPU machine (issues 8 and 19), in under 8 minutes on a fresh node:
#   0. the device kit (.gpu-kit, scripts/gpu-kit.sh) when the system lacks Open MPI, HDF5, yaml-cpp, OpenBLAS or
#      GoogleTest; the policy layer off (-DCONDUCTOR_POLICY=OFF) when there is no LibTorch
#   1. configure and build with CUDA: only the targets below, the architecture of GPU 0 only, all cores
#   2. the CUDA tests (ctest -L cuda): every kernel vs the CPU backend, full training steps vs the CPU, a
#      two-rank pipeline on one GPU over the host-staged MPI transport, NCCL between two GPUs (skipped, with
#      the reason, on a one-GPU machine), forced computation migration at p=2 (cuda_migration_*: losses and
#      weights equal single-process CUDA training bit for bit)
#   3. bench_cuda --quickstart: CUDA vs CPU losses of inputs/quickstart.yaml
#   4. `conductor run` on the GPU at p=2, both ranks sharing GPU 0 (host-staged transport), strict and readiness
#   5. bench_cuda: tokens/s and MFU of a GPT-2-1.5B-shaped stage (d 1600, 25 heads, 4 layers, T 1024), bf16, TF32
#   and one results file (the log's summary block): $OUT/device-check.txt if OUT is set, else
#   bench/results/device-check-<GPU>-<date>.txt. Exit status: 0 when every phase passed, 1 otherwise.
#
# Usage: bash jobs/device-check.sh     (from anywhere; builds in $BUILD, default <repo>/build-device; no arguments)
# Env:   BUILD, JOBS (default nproc), CUDA_ARCH (default: GPU 0's compute capability, else "90;80"),
#        GPU_KIT (auto: the kit when the system lacks a library; 1: always; 0: never), BUDGET (s, default 470), OUT
set -uo pipefail
[[ ${1:-} == -h || ${1:-} == --help ]] && {
  awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "${BASH_SOURCE[0]}"
  exit 0
}
[[ $# -eq 0 ]] || {
  echo "device-check: unexpected argument '$1': the script takes none but --help (settings come from the" \
    "environment: BUILD, JOBS, CUDA_ARCH, GPU_KIT, BUDGET, OUT)" >&2
  exit 2
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-device}
JOBS=${JOBS:-$(nproc)}
START=$(date +%s)
BUDGET=${BUDGET:-470}
# Without a GPU nothing is written: no log or results file under bench/results to mistake for a check.
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "device-check: no NVIDIA GPU visible (nvidia-smi failed): this script is for a GPU machine; nothing written" >&2
  exit 1
fi
if [[ -n ${OUT:-} ]]; then
  mkdir -p "$OUT"
  RESULTS=$OUT/device-check.txt
else
  RESULTS=$ROOT/bench/results/device-check-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null |
    head -1 | tr -c 'A-Za-z0-9\n' '-' | sed 's/-*$//')-$(date -u +%Y%m%d-%H%M).txt
  mkdir -p "$ROOT/bench/results"
fi
LOG=${RESULTS%.txt}.log
: >"$LOG"
exec > >(tee -a "$LOG") 2>&1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none

SUMMARY=()
FAILED=0
say() { echo "device-check: $*"; }

# phase NAME TIMEOUT_S COMMAND...: runs the command under a time limit and records PASS / FAIL / TIMEOUT. The
# limit shrinks to what is left of the whole check's budget (BUDGET s, default 470: 8 minutes with the summary);
# a phase that would get under 10 s is skipped (recorded as SKIPPED, which fails the check).
phase() {
  local name=$1 limit=$2
  shift 2
  local left=$((BUDGET - ($(date +%s) - START)))
  ((limit > left)) && limit=$left
  if ((limit < 10)); then
    say "=== $name skipped: the ${BUDGET}s budget is spent"
    SUMMARY+=("$(printf '%-14s %-16s %4ds' "$name" "SKIPPED (budget)" 0)")
    FAILED=1
    return 1
  fi
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
  SUMMARY+=("$(printf '%-14s %-16s %4ds' "$name" "$status" "$dt")")
  return $rc
}

say "repo $ROOT, build $BUILD, $JOBS jobs, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv

ARCH=${CUDA_ARCH:-}
if [[ -z $ARCH ]]; then
  ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
  [[ $ARCH =~ ^[0-9]+$ ]] || ARCH="90;80"
fi
# ---- the libraries: the system's, else the device kit ----
system_has_deps() {
  command -v mpiexec >/dev/null && command -v mpicxx >/dev/null || return 1
  local lib
  for lib in libyaml-cpp.so libopenblas.so libhdf5 libgtest; do
    /sbin/ldconfig -p 2>/dev/null | grep -q "$lib" || compgen -G "/usr/lib*/*/$lib*" >/dev/null ||
      compgen -G "/usr/lib*/$lib*" >/dev/null || return 1
  done
}
KIT=$ROOT/.gpu-kit
USE_KIT=${GPU_KIT:-auto}
if [[ $USE_KIT == auto ]]; then
  if system_has_deps; then USE_KIT=0; else USE_KIT=1; fi
fi
if [[ $USE_KIT == 1 ]]; then
  [[ -f $KIT/env.sh ]] || {
    say "the system lacks Open MPI/HDF5/yaml-cpp/OpenBLAS/GoogleTest and there is no $KIT (make it with" \
      "scripts/gpu-kit.sh on a Debian 12 machine and carry it along with the checkout)"
    exit 1
  }
  . "$KIT/env.sh" || exit 1
  say "using the device kit $KIT ($(wc -l <"$KIT/packages.txt") Debian packages; mpiexec $(command -v mpiexec))"
else
  say "using the system's libraries (mpiexec $(command -v mpiexec))"
fi
# LibTorch serves only the policy layer, which the check does not run.
POLICY=OFF
if [[ -n ${Torch_DIR:-} ]] || compgen -G "/usr/lib*/*/cmake/Torch" >/dev/null || [[ -d /usr/share/cmake/Torch ]]; then
  POLICY=ON
fi
say "policy layer (LibTorch) $POLICY"

GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
[[ -f $BUILD/CMakeCache.txt ]] && GEN=()  # keep the generator of an existing build folder

TARGETS=(conductor cuda_kernel_tests cuda_stage_tests cuda_pipeline_test cuda_device_test cuda_runtime_test cuda_migration_test
  bench_cuda)
TORCH_ARGS=()
[[ $POLICY == OFF ]] && TORCH_ARGS=(-DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON)
if phase configure 90 cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCONDUCTOR_CUDA=ON \
  "-DCMAKE_CUDA_ARCHITECTURES=$ARCH" -DCONDUCTOR_POLICY=$POLICY "${TORCH_ARGS[@]}" &&
  phase build 240 cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}"; then
  phase cuda-tests 120 ctest --test-dir "$BUILD" -L cuda --output-on-failure --timeout 100
  BENCH_OUT=$(mktemp)
  phase quickstart 60 bash -c "'$BUILD/bench/bench_cuda' --quickstart '$ROOT/inputs/quickstart.yaml' --steps 10 \
    | tee -a '$BENCH_OUT'"
  # conductor run at p=2 on one GPU: both ranks share GPU 0 over the host-staged (MPI) transport. MFU divides by
  # ranks x runtime.peak_tflops: half of the GPU's 989.4 bf16 TFLOP/s per rank makes it the one GPU's MFU.
  RUNS=$BUILD/device-runs
  for exec_mode in strict readiness; do
    phase "run-$exec_mode" 60 mpiexec -n 2 --oversubscribe "$BUILD/conductor" run "$ROOT/inputs/quickstart.yaml" \
      backend=cuda cuda.allow_gpu_sharing=true cuda.transport=mpi parallel.pipeline=2 model.n_layers=4 \
      model.d_model=768 model.n_heads=12 model.seq_len=512 model.precision=bf16 parallel.microbatches=8 \
      parallel.microbatch_size=4 run.steps=6 schedule.execution=$exec_mode trace.enabled=false runtime.peak_tflops=494.7 \
      run.output="$RUNS/$exec_mode" run.overwrite=true
  done
  phase bench-bf16 60 bash -c "'$BUILD/bench/bench_cuda' --precision bf16 --layers 4 --batch 8 --microbatches 4 \
    --steps 4 | tee -a '$BENCH_OUT'"
  phase bench-tf32 45 bash -c "'$BUILD/bench/bench_cuda' --precision fp32 --tf32 --layers 4 --batch 8 \
    --microbatches 2 --steps 2 | tee -a '$BENCH_OUT'"
fi

{
echo
echo "==================== device-check summary ===================="
echo "GPU:   $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), CUDA arch $ARCH"
echo "git:   $(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
for line in "${SUMMARY[@]}"; do echo "phase: $line"; done
if [[ -n ${BENCH_OUT:-} && -f $BENCH_OUT ]]; then
  grep -E "^bench_cuda|^  (step [0-9]+\.[0-9]+ ms|MFU)" "$BENCH_OUT" | sed 's/^/bench: /'
fi
for exec_mode in strict readiness; do
  m=${RUNS:-/nonexistent}/$exec_mode/metrics.jsonl
  [[ -f $m ]] && echo "run:   p=2 on one GPU, $exec_mode, last step: $(tail -1 "$m" | /usr/bin/env python3 -c \
    'import json,sys; r=json.load(sys.stdin); print("loss %.4f, %.1f ms, %.0f tokens/s, MFU %.2f%%" % (r["loss"], r["step_time_ms"], r["tokens_per_s"], 100*r["mfu"]))')"
done
if [[ -f $BUILD/Testing/Temporary/LastTest.log ]]; then
  grep -hE "^(SKIPPED|step [0-9]+: pipeline|PASSED|FAILED)" "$BUILD/Testing/Temporary/LastTest.log" | sed 's/^/tests: /'
fi
echo "total: $(($(date +%s) - START)) s; result: $([[ $FAILED == 0 ]] && echo PASS || echo FAIL)"
echo "kit:   $([[ $USE_KIT == 1 ]] && echo "the device kit ($KIT)" || echo "the system's libraries"), policy layer $POLICY"
echo "=============================================================="
} | tee "$RESULTS"
say "results: $RESULTS (full log: $LOG)"
exit $FAILED
