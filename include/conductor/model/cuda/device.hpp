#pragma once
// One GPU per MPI rank. Include only from code built with CONDUCTOR_HAVE_CUDA.
#include <mpi.h>

namespace conductor::model::cuda {

// Number of visible CUDA devices; 0 when there is no device or no usable driver (never throws).
int device_count();
// Why device_count() is 0 ("no CUDA-capable device is detected", "CUDA driver version is insufficient...").
const char* no_device_reason();

// Collective over `world`: picks and sets (cudaSetDevice) this rank's GPU from its node-local rank, found with
// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED). Under srun, SLURM_LOCALID should agree; a disagreement is warned
// about (the MPI answer wins: it is what actually shares the node). More local ranks than visible GPUs is an
// Error on every rank unless allow_sharing, in which case ranks share GPUs round-robin (local_rank % gpus).
// No visible GPU at all is always an Error. Returns the device ordinal. Call it before any other CUDA call: it
// also raises CUDA_DEVICE_MAX_CONNECTIONS to 32 (unless set), which the NCCL transport relies on.
int select_device(MPI_Comm world, bool allow_sharing);

// The node-local rank and the number of ranks on this node (collective over world).
void node_local_rank(MPI_Comm world, int& local_rank, int& local_size);

}  // namespace conductor::model::cuda
