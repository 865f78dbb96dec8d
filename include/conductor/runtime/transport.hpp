#pragma once
// The data plane: asynchronous point-to-point tensor transfers with completion tests. The runtime posts
// receives ahead of need and polls them; an arrival is what makes an op ready. MpiTransport implements it over
// MPI (host memory); an NCCL implementation (device memory, CUDA events for completion) fits the same shape.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

#include "conductor/plan/plan.hpp"
#include "conductor/sched/schedule.hpp"

namespace conductor::runtime {

using TransferId = std::int64_t;

class Transport {
 public:
  virtual ~Transport() = default;
  // Starts a transfer; the buffer must stay alive and untouched until the transfer completes.
  virtual TransferId post_send(int peer, int tag, const void* data, std::size_t bytes) = 0;
  virtual TransferId post_recv(int peer, int tag, void* data, std::size_t bytes) = 0;
  // Non-blocking: true once the transfer has completed (then the id is released).
  virtual bool test(TransferId id) = 0;
  // Ids of pending transfers that completed, without blocking (each reported once).
  virtual std::vector<TransferId> poll() = 0;
  // Blocks until at least one pending transfer completes (or none is pending); returns those that completed.
  virtual std::vector<TransferId> wait_some() = 0;
  virtual std::size_t pending() const = 0;
  // True when a send may be posted before the op producing its buffer has finished, because the transport
  // orders itself after the work already queued on the compute stream (NCCL, host-staged device transfers).
  // False for host transports: the executor posts a send once its producer finished.
  virtual bool orders_after_compute() const { return false; }
};

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(MPI_Comm comm);
  ~MpiTransport() override;
  TransferId post_send(int peer, int tag, const void* data, std::size_t bytes) override;
  TransferId post_recv(int peer, int tag, void* data, std::size_t bytes) override;
  bool test(TransferId id) override;
  std::vector<TransferId> poll() override;
  std::vector<TransferId> wait_some() override;
  std::size_t pending() const override { return ids_.size(); }

 private:
  std::vector<TransferId> collect(int completed, bool blocking);
  MPI_Comm comm_;
  std::vector<MPI_Request> requests_;  // parallel to ids_
  std::vector<TransferId> ids_;
  std::vector<int> indices_;
  TransferId next_ = 0;
};

class Compute;

// The tensor (data-plane) transport for the plan's backend, over `data_comm` (a communicator of its own):
// MpiTransport on host memory for cpu and emulated; for cuda, per cuda.transport: NcclTransport (auto when
// every rank of a node has its own GPU) or the host-staged MPI transport (auto when ranks share a GPU).
// Collective over data_comm; `chosen` receives the transport's name ("mpi", "nccl", "mpi-host-staged").
std::unique_ptr<Transport> make_data_transport(const plan::Plan& plan, const sched::Schedule& order, int rank,
                                               Compute& compute, MPI_Comm data_comm, std::string& chosen);

}  // namespace conductor::runtime
