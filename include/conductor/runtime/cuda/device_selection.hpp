#pragma once
// One GPU per MPI rank, chosen by the rank's index among the ranks of its node. Include only from code built
// with CONDUCTOR_HAVE_CUDA.
#include <mpi.h>

namespace conductor::runtime::cuda {

// Collective over `world`: picks and sets (cudaSetDevice) this rank's GPU from its node-local rank, found with
// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED). Under srun, SLURM_LOCALID should agree; a disagreement is warned
// about (the MPI answer wins: it is what actually shares the node). More local ranks than visible GPUs is an
// Error on every rank unless allow_sharing, in which case ranks share GPUs round-robin (local_rank % gpus).
// No visible GPU at all is always an Error. Returns the device ordinal. Call it before any other CUDA call: it
// also raises CUDA_DEVICE_MAX_CONNECTIONS to 32 (unless set), which the NCCL transport relies on.
int select_device(MPI_Comm world, bool allow_sharing);

// The node-local rank and the number of ranks on this node (collective over world).
void node_local_rank(MPI_Comm world, int& local_rank, int& local_size);

}  // namespace conductor::runtime::cuda
