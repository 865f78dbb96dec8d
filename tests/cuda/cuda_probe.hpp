#pragma once
// The `--probe MODE` step of the two-rank CUDA tests (ctest runs the binary alone before mpiexec): exits 77
// with the reason when this machine has fewer GPUs than MODE needs (nccl: 2, mpi: 1).
#include <cstdio>
#include <string>

#include "conductor/model/cuda/device.hpp"

namespace conductor::test {

// Parses `[--probe] mpi|nccl`. Returns -1 to go on (mode set, not probing), else the exit code.
inline int cuda_probe(int argc, char** argv, const char* what, std::string& mode) {
  const bool probe = argc > 1 && std::string(argv[1]) == "--probe";
  mode = argc > (probe ? 2 : 1) ? argv[probe ? 2 : 1] : "";
  if (mode != "mpi" && mode != "nccl") {
    std::fprintf(stderr, "usage: %s [--probe] mpi|nccl\n", argv[0]);
    return 2;
  }
  if (!probe) return -1;
  const int need = mode == "nccl" ? 2 : 1;
  const int have = model::cuda::device_count();
  if (have < need) {
    std::printf("SKIPPED: the %s %s test needs %d CUDA device(s), found %d (%s)\n", mode.c_str(), what, need, have,
                have == 0 ? model::cuda::no_device_reason() : "too few devices");
    return 77;
  }
  return 0;
}

}  // namespace conductor::test
