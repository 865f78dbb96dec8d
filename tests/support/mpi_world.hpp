#pragma once
// MPI_COMM_WORLD's size and this process's rank, for the MPI tests (add_mpi_test links mpi_gtest_main, which
// puts tests/support on the include path).
#include <mpi.h>

namespace conductor::test_support {

inline int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

}  // namespace conductor::test_support
