#!/usr/bin/env bash
# The build a GPU node without LibTorch gets: configured with -DCONDUCTOR_POLICY=OFF and LibTorch out of reach
# (find_package(Torch) disabled, so a stray search fails the configure), everything built, no binary linked to
# LibTorch, and the whole test suite of that build run (every test it builds must pass).
# Usage: scripts/test-no-policy.sh [BUILD_DIR]   (default build-nopolicy; JOBS, CMAKE_ARGS from the environment;
# CTEST_ARGS selects tests, e.g. CI's "-E faults_|slurm_": the fault and Slurm suites already ran in the main build)
set -euo pipefail
. "$(dirname "$0")/usage.sh"
script_help "$0" "$@"
[[ $# -le 1 && "${1:-}" != -* ]] || refuse_arguments test-no-policy "one build folder" "${@:$(($# > 1 ? 2 : 1))}"
cd "$(dirname "$0")/.."
build=${1:-build-nopolicy}
jobs=${JOBS:-$(nproc)}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# shellcheck disable=SC2086  # CMAKE_ARGS is a list of flags
cmake --no-warn-unused-cli -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCONDUCTOR_POLICY=OFF -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON \
  -DTorch_DIR=/nonexistent -DCMAKE_PREFIX_PATH=/nonexistent ${CMAKE_ARGS:-}
cmake --build "$build" -j "$jobs"
linked=()
while IFS= read -r exe; do
  if ldd "$exe" 2>/dev/null | grep -Eq 'lib(torch|c10)'; then linked+=("$exe"); fi
done < <(find "$build" -type f -executable ! -name '*.so*' ! -path '*/CMakeFiles/*')
if [[ ${#linked[@]} -gt 0 ]]; then
  echo "test-no-policy: linked to LibTorch despite CONDUCTOR_POLICY=OFF:" >&2
  printf '  %s\n' "${linked[@]}" >&2
  exit 1
fi
cd "$build"
# shellcheck disable=SC2086  # CTEST_ARGS is a list of flags
ctest --output-on-failure -j "$jobs" --timeout 600 ${CTEST_ARGS:-}
