// GPU selection: one GPU per MPI rank, chosen by the rank's index among the ranks of its node.
#include "conductor/runtime/cuda/device_selection.hpp"

#include <cuda_runtime.h>

#include <cstdlib>
#include <string>

#include "conductor/model/cuda/check.hpp"
#include "conductor/model/cuda/device.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/log.hpp"
#include "conductor/util/mpi.hpp"

namespace conductor::runtime::cuda {

void node_local_rank(MPI_Comm world, int& local_rank, int& local_size) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  MPI_Comm node;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
}

int select_device(MPI_Comm world, bool allow_sharing) {
  // Before any CUDA call creates the context: the NCCL transport keeps several streams busy with kernels that
  // wait for a peer, and with the default 8 hardware queues two such streams can share a queue, where a
  // waiting kernel would hold back an unrelated one (a false dependency that can deadlock two ranks).
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);  // 0: a value the user set wins
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  int local_rank = 0, local_size = 1;
  node_local_rank(world, local_rank, local_size);

  // Under srun the launcher's idea of the local rank should be the same; when it is not, ranks were placed
  // differently than Slurm thinks (e.g. a wrapper script reordered them), and GPU binding may be wrong.
  if (const char* slurm = std::getenv("SLURM_LOCALID")) {
    char* end = nullptr;
    const long slurm_local = std::strtol(slurm, &end, 10);
    if (end == slurm || *end != '\0' || slurm_local != local_rank) {
      log::warn("rank " + std::to_string(rank) + ": SLURM_LOCALID=" + slurm + " but the MPI node-local rank is " +
                std::to_string(local_rank) + "; selecting the GPU by the MPI node-local rank");
    }
  }

  const int gpus = model::cuda::device_count();
  std::string problem;
  if (gpus == 0) {
    problem = "rank " + std::to_string(rank) + " sees no CUDA device (" + model::cuda::no_device_reason() +
              "); check CUDA_VISIBLE_DEVICES and the job's GPU allocation (e.g. --gpus-per-node)";
  } else if (local_size > gpus && !allow_sharing) {
    problem = "rank " + std::to_string(rank) + ": " + std::to_string(local_size) + " ranks on this node but only " +
              std::to_string(gpus) +
              " visible CUDA device(s); start at most one rank per GPU or allow GPU sharing "
              "(ranks then share GPUs round-robin, and tensors between them use the host-staged MPI transport)";
  }
  // Every rank learns whether any rank failed, so none is left waiting in a later collective.
  mpi::check_all(problem.empty(), problem, kExitFailure, world);
  const int device = local_rank % gpus;
  cudaCheck(cudaSetDevice(device));
  if (local_size > gpus) {
    log::warn("rank " + std::to_string(rank) + " shares CUDA device " + std::to_string(device) + " with other ranks (" +
              std::to_string(local_size) + " ranks, " + std::to_string(gpus) + " devices on this node)");
  }
  return device;
}

}  // namespace conductor::runtime::cuda
