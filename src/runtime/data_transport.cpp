// Choosing the data plane's transport (see transport.hpp).
#include <set>

#include "conductor/runtime/compute.hpp"
#include "conductor/runtime/transport.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/mpi.hpp"
#ifdef CONDUCTOR_HAVE_CUDA
#include "conductor/model/cuda/device.hpp"
#include "conductor/runtime/cuda/device_selection.hpp"
#include "conductor/runtime/host_staged_transport.hpp"
#include "conductor/runtime/nccl_transport.hpp"
#endif

namespace conductor::runtime {

namespace {
#ifdef CONDUCTOR_HAVE_CUDA
// The ranks this rank exchanges tensors with (both directions: activations one way, gradients back).
std::vector<int> tensor_peers(const sched::Schedule& order, int rank) {
  std::set<int> peers;
  for (const auto& a : order.ranks[static_cast<std::size_t>(rank)]) {
    if (const auto in = sched::input_of(order, rank, a); in && !in->local()) peers.insert(in->from_rank);
    if (const auto out = sched::output_of(order, rank, a); out && !out->local()) peers.insert(out->to_rank);
  }
  return {peers.begin(), peers.end()};
}
#endif
}  // namespace

std::unique_ptr<Transport> make_data_transport(const plan::Plan& plan, const sched::Schedule& order, int rank,
                                               Compute& compute, MPI_Comm data_comm, std::string& chosen) {
  if (plan.backend != "cuda") {
    chosen = "mpi";
    return std::make_unique<MpiTransport>(data_comm);
  }
#ifdef CONDUCTOR_HAVE_CUDA
  int local_rank = 0, local_size = 1;
  cuda::node_local_rank(data_comm, local_rank, local_size);
  const int gpus = model::cuda::device_count();
  int shared_here = local_size > gpus ? 1 : 0, shared_anywhere = 0;
  MPI_Allreduce(&shared_here, &shared_anywhere, 1, MPI_INT, MPI_MAX, data_comm);
  std::string problem;
  if (plan.cuda.transport == "nccl" && shared_here) {
    problem = "cuda.transport = 'nccl' needs one GPU per rank, but " + std::to_string(local_size) + " ranks share " +
              std::to_string(gpus) + " GPU(s) on this node (allowed with shared GPUs: mpi, auto)";
  }
  mpi::check_all(problem.empty(), problem, kExitUsage, data_comm);
  auto stream = static_cast<cudaStream_t>(compute.device_stream());
  // One answer for the whole pipeline: a transfer's two ends must use the same transport.
  const bool nccl = plan.cuda.transport == "nccl" || (plan.cuda.transport == "auto" && !shared_anywhere);
  if (nccl) {
    chosen = "nccl";
    return std::make_unique<NcclTransport>(data_comm, tensor_peers(order, rank), stream);
  }
  chosen = "mpi-host-staged";
  return std::make_unique<HostStagedTransport>(std::make_unique<MpiTransport>(data_comm), stream);
#else
  (void)order;
  (void)rank;
  (void)compute;
  (void)data_comm;
  throw InputError("backend = 'cuda' cannot run in this build (allowed: cpu, emulated)");
#endif
}

}  // namespace conductor::runtime
