#pragma once
// The `--probe MODE` step of the two-rank CUDA tests (ctest runs the binary alone before mpiexec): exits 77
// with the reason when this machine has fewer GPUs than MODE needs (nccl: 2, mpi: 1).
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <string>

#include "conductor/model/cuda/device.hpp"
#include "conductor/util/error.hpp"

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

// main() of a two-rank test whose checks return their failure count: the probe, then run_checks(mode, rank) under
// MPI; a collective exit ends every rank with its code, another error aborts all; PASSED/FAILED on rank 0.
inline int mpi_checks_main(int argc, char** argv, const char* what, int (*run_checks)(const std::string&, int)) {
  std::string mode;
  if (const int code = cuda_probe(argc, argv, what, mode); code >= 0) return code;
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int failures = 0;
  try {
    failures = run_checks(mode, rank);
  } catch (const CollectiveExit& e) {
    MPI_Finalize();
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  if (rank == 0) std::printf("%s\n", failures == 0 ? "PASSED" : "FAILED");
  return failures == 0 ? 0 : 1;
}

}  // namespace conductor::test
