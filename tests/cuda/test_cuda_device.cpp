// select_device() under mpiexec with 2 ranks on one node. Runs on every machine, GPU or not:
//  - node_local_rank() numbers the two ranks 0 and 1 of 2;
//  - without a GPU, select_device() fails on every rank together (CollectiveExit), never on one rank alone;
//  - with G GPUs: without sharing, 2 ranks need G >= 2 (else every rank fails) and rank i gets GPU i; with
//    sharing, rank i gets GPU i % G.
#include <mpi.h>

#include <cstdio>
#include <string>

#include "conductor/model/cuda/device.hpp"
#include "conductor/runtime/cuda/device_selection.hpp"
#include "conductor/util/error.hpp"

namespace cu = conductor::model::cuda;

namespace {
int failures = 0;
void expect(bool ok, const std::string& what, int rank) {
  if (!ok) {
    std::fprintf(stderr, "[rank %d] FAILED: %s\n", rank, what.c_str());
    failures++;
  }
}

// -1: select_device ended with CollectiveExit on this rank; else the device it chose.
int try_select(bool allow_sharing) {
  try {
    return conductor::runtime::cuda::select_device(MPI_COMM_WORLD, allow_sharing);
  } catch (const conductor::CollectiveExit&) {
    return -1;
  }
}
}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int local = -1, local_size = -1;
  conductor::runtime::cuda::node_local_rank(MPI_COMM_WORLD, local, local_size);
  expect(size == 2, "run with 2 ranks", rank);
  expect(local == rank && local_size == size,
         "node-local rank " + std::to_string(local) + " of " + std::to_string(local_size) + " on a single node", rank);
  const int gpus = cu::device_count();
  for (const bool sharing : {false, true}) {
    const int dev = try_select(sharing);
    int devs[2] = {-2, -2};
    MPI_Allgather(&dev, 1, MPI_INT, devs, 1, MPI_INT, MPI_COMM_WORLD);
    const std::string mode = sharing ? "with sharing" : "without sharing";
    expect(devs[0] == -1 ? devs[1] == -1 : devs[1] != -1, "ranks disagree on failure " + mode, rank);
    if (gpus == 0) {
      expect(dev == -1, "no GPU but select_device succeeded " + mode, rank);
    } else if (!sharing && gpus < size) {
      expect(dev == -1, "more ranks than GPUs without sharing must fail", rank);
    } else {
      expect(dev == local % gpus, "rank " + std::to_string(rank) + " got device " + std::to_string(dev) + " " + mode,
             rank);
    }
  }
  int any = 0;
  MPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) std::printf("select_device with %d GPU(s): %s\n", gpus, any ? "FAILED" : "PASSED");
  MPI_Finalize();
  return any ? 1 : 0;
}
