#!/usr/bin/env bash
# Proves the device kit (scripts/gpu-kit.sh) here, the way a bare GPU node uses it: in a private mount namespace
# the system's own Open MPI, PMIx, hwloc, HDF5, yaml-cpp, OpenBLAS, GoogleTest, nlohmann-json and zlib headers
# are hidden (every file of their Debian packages is covered by /dev/null), so neither CMake nor the compiler nor
# the loader can pick them up; then it configures with nothing but .gpu-kit/env.sh (no LibTorch, no CUDA), builds
# the binary and the CPU tests of each library's user, checks with ldd that every one of those libraries comes from
# the kit, and runs the tests (the MPI one under the kit's mpiexec). Needs root (unshare, mount) and apt (the kit
# download). Not part of `make test` (network); `make test-gpu-kit` runs it.
# Usage: scripts/test-gpu-kit.sh [--reuse-kit] [BUILD_DIR]     (default build-gpu-kit; JOBS default nproc)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/usage.sh"
script_help "$0" "$@"

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REUSE=0
if [[ ${1:-} == --reuse-kit ]]; then
  REUSE=1
  shift
fi
[[ $# -le 1 && "${1:-}" != -* ]] || refuse_arguments test-gpu-kit "--reuse-kit, then one build folder" "${@:$(($# > 1 ? 2 : 1))}"
BUILD=$(realpath -m "${1:-$ROOT/build-gpu-kit}")
JOBS=${JOBS:-$(nproc)}
KIT=$ROOT/.gpu-kit
say() { echo "test-gpu-kit: $*"; }

if [[ ${_GPU_KIT_INSIDE:-} != 1 ]]; then
  [[ $(id -u) == 0 ]] || {
    say "needs root (a private mount namespace hides the system's libraries)"
    exit 1
  }
  t0=$(date +%s)
  if ((!REUSE)) || [[ ! -f $KIT/env.sh ]]; then "$ROOT/scripts/gpu-kit.sh"; fi
  say "kit ready in $(($(date +%s) - t0)) s"
  exec env _GPU_KIT_INSIDE=1 unshare --mount --propagation private "$0" "$BUILD"
fi

# ---- inside the namespace: hide the system's copies ----
hide_re='^(lib)?(openmpi|pmix|hwloc|hdf5|yaml-cpp|openblas|gtest|gmock|googletest|nlohmann|mpi-default|libevent-dev|zlib1g-dev)'
pkgs=$(dpkg-query -W -f='${Package}\n' | grep -E "$hide_re" || true)
hidden=0
for p in $pkgs; do
  while IFS= read -r f; do
    [[ -f $f && ! -L $f ]] || continue
    mount --bind /dev/null "$f"
    hidden=$((hidden + 1))
  done < <(dpkg -L "$p" 2>/dev/null)
done
say "hid $hidden files of the system's $(echo $pkgs | wc -w) packages: $(echo $pkgs)"
# A sanity check that the hiding works: the system's headers and libraries read empty now.
for f in /usr/include/yaml-cpp/yaml.h /usr/lib/x86_64-linux-gnu/libmpi.so.40.30.4; do
  [[ ! -e $f || ! -s $f ]] || {
    say "FAIL: $f still readable"
    exit 1
  }
done

. "$KIT/env.sh"
mkdir -p "$BUILD"
LOGS=$BUILD/gpu-kit-logs
mkdir -p "$LOGS"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
t0=$(date +%s)
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCONDUCTOR_POLICY=OFF -DCONDUCTOR_CUDA=OFF \
  -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON >"$LOGS/configure.log" 2>&1 || {
  tail -30 "$LOGS/configure.log"
  say "FAIL: configure"
  exit 1
}
targets=(conductor model_tests trace_tests config_tests mpi_test_loss_equality)
cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}" >"$LOGS/build.log" 2>&1 || {
  grep -E "error|Error" "$LOGS/build.log" | head -20
  say "FAIL: build"
  exit 1
}
say "configured and built against the kit in $(($(date +%s) - t0)) s"

# Every library of the kit's own part must resolve into the kit; no /usr copy of them may appear (the fallback
# part, libevent and the like, comes from the system where it has them: that is its design, docs/gpu.md).
fail=0
for exe in "$BUILD/conductor" "$BUILD/tests/runtime/mpi_test_loss_equality"; do
  while read -r lib _ path _; do
    case $lib in
      libmpi* | libopen-* | libpmix* | libhwloc* | libhdf5* | libyaml-cpp* | libopenblas* | libsz* | libaec*)
        if [[ $path != "$KIT"/* ]]; then
          say "FAIL: $(basename "$exe") loads $lib from $path, not from the kit"
          fail=1
        fi
        ;;
    esac
  done < <(ldd "$exe")
done
ldd "$BUILD/conductor" | grep -E "libmpi|libhdf5|libyaml|libopenblas|libpmix|libhwloc" | sed 's/^/  ldd conductor: /'
grep -E "^(MPI_mpi_LIBRARY|HDF5_C_INCLUDE_DIR|HDF5_C_LIBRARY_hdf5|OPENBLAS_LIBRARY|CBLAS_INCLUDE_DIR|yaml-cpp_DIR|nlohmann_json_DIR|GTest_DIR|ZLIB_INCLUDE_DIR|MPIEXEC_EXECUTABLE)[:=]" \
  "$BUILD/CMakeCache.txt" | sed 's/^/  cache: /'
if grep -E "^(MPI_mpi_LIBRARY|HDF5_C_INCLUDE_DIR|HDF5_C_LIBRARY_hdf5|OPENBLAS_LIBRARY|CBLAS_INCLUDE_DIR|yaml-cpp_DIR|nlohmann_json_DIR|GTest_DIR|ZLIB_INCLUDE_DIR|MPIEXEC_EXECUTABLE):[A-Z]+=/usr" "$BUILD/CMakeCache.txt"; then
  say "FAIL: CMake found a system copy"
  fail=1
fi
((fail == 0)) || exit 1

# ---- the CPU tests of that build ----
t0=$(date +%s)
export OMP_NUM_THREADS=1 CONDUCTOR_SOURCE_DIR=$ROOT
for t in tests/model/model_tests tests/trace/trace_tests tests/config/config_tests; do
  "$BUILD/$t" --gtest_brief=1 >"$LOGS/$(basename "$t").log" 2>&1 || {
    tail -20 "$LOGS/$(basename "$t").log"
    say "FAIL: $t"
    exit 1
  }
  say "PASS $t ($(grep -o '[0-9]* tests\? from [0-9]* test suites\? ran' "$LOGS/$(basename "$t").log" | head -1))"
done
[[ $(command -v mpiexec) == "$KIT"/* ]] || {
  say "FAIL: mpiexec is $(command -v mpiexec), not the kit's"
  exit 1
}
mpiexec -n 2 --oversubscribe "$BUILD/tests/runtime/mpi_test_loss_equality" --gtest_brief=1 >"$LOGS/mpi.log" 2>&1 || {
  tail -30 "$LOGS/mpi.log"
  say "FAIL: runtime_loss_equality_p2 under the kit's mpiexec"
  exit 1
}
say "PASS runtime_loss_equality_p2 under $(command -v mpiexec)"
say "tests ran in $(($(date +%s) - t0)) s; PASS"
